package dispatch

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/container"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/kernel"
	"github.com/postern-dev/postern/internal/procstat"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
)

// Spec is one run as a person asked for it.
type Spec struct {
	// policySrc is the policy file's bytes as Run read and compiled them.
	policySrc []byte

	Machine    string   // default "local"
	PolicyPath string   // "" gets a policy that allows nothing
	AddHosts   []string // NAME:IP pins for the door's lookups
	Resolver   string   // DNS server for the door's lookups; "" is the system resolver
	// UpstreamRoots is a PEM file of authorities the door trusts, besides the
	// machine's, when it verifies a host the policy inspects (local runs).
	UpstreamRoots string
	EgressOpen    string // a reason to run without a wall; recorded
	Command       []string
	Dir           string
	// Env is postern's own environment: a local run starts from it, a
	// remote one gets only its terminal and language from it.
	Env []string
	// PassEnv are variables every lane gives the run on top of that
	// (--env): "NAME=VALUE", or "NAME" for NAME's value in Env. The
	// machine's env names are added. The record keeps their names, never
	// their values.
	PassEnv []string
	// KeepHome keeps what the run writes in its home outside its writable
	// places (its private layer), in a directory of postern's named at the
	// end, rather than discarding it.
	KeepHome bool
	// PidsLimit overrides the policy's pids_limit when set.
	PidsLimit int
	// Network is "none" for a run with no network at all: a network
	// namespace with only lo, no door, no DNS (postern run --network none);
	// "" puts the run behind its door.
	Network string

	// ID names the run; "" makes a new one.
	ID string
	// Dispatch and Task name the dispatch and task a run is an attempt of;
	// they go into its record (see fleetrun.go).
	Dispatch, Task string
	// OnStarted, if set, is called once with the run's record when its
	// command has started behind the wall on its machine.
	OnStarted func(*records.Run)

	Stdin          *os.File
	Stdout, Stderr *os.File
	// Signals are the signals the caller received; they are forwarded to the run
	// (SIGWINCH resizes the run's terminal). The caller owns signal handling.
	Signals <-chan os.Signal
	// SignalsHeld, if set, is closed once Signals receives every signal
	// it is to: the run's command does not start before. Where the wall
	// is raised here, it is awaited only then, so the caller may ask for
	// its signals while the wall goes up.
	SignalsHeld <-chan struct{}
	// Warn receives warnings meant for the person (stderr).
	Warn   io.Writer
	Logger *slog.Logger
	// OnEvent, if set, sees every event as it is recorded.
	OnEvent func(event.Event)
	// OnStart, if set, is told once the run is recorded as running, before
	// its command is started: its id, machine, lane, carry and policy are
	// known. A refused run never starts.
	OnStart func(*records.Run)
	// Remote says how to reach a machine over ssh (see remote.go).
	Remote Remote
	// Container, with an image, runs the command in a local container (see
	// container.go).
	Container Container
	// Upstream, when set, joins a gateway: the run's door sends every
	// connection on to it instead of judging it (see gateway.go).
	Upstream *door.Upstream
	// Workspace says what work the run takes to its machine (see
	// workspace.go).
	Workspace Workspace
}

// NetworkNone is Spec.Network for a run with no network at all.
const NetworkNone = "none"

// PolicyError is a policy that could not be read or compiled.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// teardownTimeout bounds the work done after a run ends: draining the door, flushing
// events, writing the final record.
const teardownTimeout = 10 * time.Second

// Run dispatches one run and returns its final record. A run that no carry can wall
// is refused before anything is spawned: the error is a *carry.Refusal and the
// record says "refused". The run's own exit status is in the record.
func Run(ctx context.Context, store *records.Store, spec Spec) (*records.Run, error) {
	if len(spec.Command) == 0 {
		return nil, errors.New("no command to run: give it after --, e.g. postern run -- claude")
	}
	if spec.Machine == "" {
		spec.Machine = machine.Local
	}
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.DiscardHandler)
	}
	if spec.Warn == nil {
		spec.Warn = io.Discard
	}
	if spec.Remote.Agents == nil {
		spec.Remote.Agents = store
	}
	if spec.Remote.Warn == nil {
		spec.Remote.Warn = spec.Warn
	}
	pol, policySrc, err := runPolicy(spec)
	if err != nil {
		return nil, &PolicyError{err}
	}
	spec.policySrc = policySrc
	// Whatever the lane, the run never holds what the door injects.
	spec.Env = withoutInjected(spec.Env, pol)
	pins, err := parsePins(spec.AddHosts)
	if err != nil {
		return nil, &PolicyError{err}
	}
	m, rec, err := store.MachineAndRecord(spec.Machine)
	if err != nil {
		if errors.Is(err, records.ErrNotFound) {
			return nil, fmt.Errorf("machine %q is not known: add it with 'postern machine add %s --ssh DEST', or use --machine local", spec.Machine, spec.Machine)
		}
		return nil, err
	}
	goos := ""
	if rec != nil {
		goos = rec.OS
	}
	run := &records.Run{
		ID:               cmp.Or(spec.ID, newID()),
		Machine:          m.Name,
		Lane:             m.Lane(goos),
		Command:          spec.Command,
		Dir:              spec.Dir,
		Policy:           policyName(pol),
		Mode:             pol.Mode.String(),
		EgressOpenReason: strings.TrimSpace(spec.EgressOpen),
		StartedAt:        time.Now().UTC(),
		Pid:              os.Getpid(),
		PidStart:         procstat.StartTime(os.Getpid()),
		Dispatch:         spec.Dispatch,
		Task:             spec.Task,
	}
	vars, names, err := passedEnv(spec.PassEnv, m, spec.Env, pol, spec.Warn)
	if err != nil {
		return nil, err
	}
	spec.PassEnv, run.EnvNames = vars, names
	keepPolicy(run, policySrc)
	noNetwork := spec.Network == NetworkNone
	switch {
	case spec.Network != "" && !noNetwork:
		return nil, &PolicyError{fmt.Errorf("--network %q: the one value is none (a run with no network at all)", spec.Network)}
	case noNetwork && strings.TrimSpace(spec.EgressOpen) != "":
		return nil, &PolicyError{errors.New("--network none and --egress-open say opposite things: give one")}
	case noNetwork && spec.Container.Image != "":
		spec.Container.Network = "none"
	}
	if noNetwork {
		run.Network = NetworkNone
	}
	inContainer := spec.Container.Image != ""
	if inContainer {
		run.Lane = machine.LaneLocalContainer
		if refused, err := checkContainer(store, spec, m, rec, run); refused || err != nil {
			if refused {
				return run, err
			}
			return nil, err
		}
	}
	release := ""
	if m.IsLocal() {
		release = kernel.Release()
	}
	// The carriers this binary has; their own settings are made on the one
	// chosen, once the run gets that far (walled.go).
	ct := &container.Carrier{Image: spec.Container.Image}
	carriers := []carry.Carrier{&netwall.Carrier{}, &seatbelt.Carrier{}, ct}
	carrier, err := carry.Choose(rec, carry.Spec{Machine: m.Name, Lane: run.Lane, EgressOpen: spec.EgressOpen, Kernel: release,
		NoNetwork: noNetwork || spec.Container.Network == ContainerNetworkNone, Carriers: carriers})
	if err != nil {
		return refuse(store, run, err)
	}
	c := carrier.Carry()
	run.Carry = c
	localWall := m.IsLocal() && !inContainer && (c == carry.NetworkWall || c == carry.ConnectDoor)
	if !localWall && spec.SignalsHeld != nil {
		<-spec.SignalsHeld
	}
	if inContainer {
		return runContainerLane(ctx, store, spec, rec, run, pol, pins, carrier, ct)
	}
	if noNetwork && c != carry.NetworkWall {
		return refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: fmt.Sprintf("--network none needs a Linux network wall, and this run's carry is %s", c),
			Fix:       "run on a Linux machine, or in a container with --container-network none"})
	}
	switch {
	case c == carry.None:
		run.Network = "open"
		run.Seal = sealOf(ctx, pol, sealNotOpen)
		spec.Env = withGuardrails(spec.Env, pol, true)
	case noNetwork:
		run.Seal = sealOf(ctx, pol, sealNotNetwork)
	case c == carry.ConnectDoor:
		run.Seal = sealOf(ctx, pol, sealNotMacOS)
	case m.IsLocal():
		run.Seal = sealOf(ctx, pol, "")
	}
	warnSeal(spec.Warn, run.ID, run.Seal)
	if err := checkJoin(spec, m, c); err != nil {
		return nil, &PolicyError{err}
	}
	if !m.IsLocal() && c != carry.NetworkWall && c != carry.ConnectDoor && c != carry.None {
		return refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: fmt.Sprintf("carry %s is not available on remote machines yet", c),
			Fix:       "run on a Linux machine, or with --egress-open \"<reason>\" to open the network deliberately"})
	}
	if m.IsLocal() {
		// Looked up as the run will look it up: a command that is not
		// there is not worth a wall.
		spec.Env = withEnv(spec.Env, spec.PassEnv)
		if ce := checkCommand(spec.Command, spec.Dir, spec.Env, pathPassed(spec.PassEnv)); ce != nil {
			return finish(ctx, store, run, 0, ce)
		}
	}
	run.State = records.StateRunning
	started(spec, run)
	// Workspace: the work is shipped before the run starts; its result is
	// fetched after it ends (workspace.go).
	shippedFrom := spec.Dir
	if err := startWorkspace(ctx, store, run, &spec, m); err != nil {
		return nil, err
	}
	if m.IsLocal() && spec.Dir != shippedFrom {
		// In a local copy, a relative command is the copy's: one the
		// copy lacks (ignored, so never shipped) is not worth a wall.
		if ce := checkCommand(spec.Command, spec.Dir, spec.Env, pathPassed(spec.PassEnv)); ce != nil {
			endLocalWorkspace(ctx, store, run)
			return finish(ctx, store, run, 0, ce)
		}
	}
	if localWall {
		// The running record is written while the wall goes up, and is durable
		// before the command starts, and the caller's signals held.
		snapshot := *run
		recorded := make(chan error, 1)
		go func() { recorded <- store.PutRun(&snapshot) }()
		var once sync.Once
		var werr error
		wait := func() error {
			once.Do(func() {
				werr = <-recorded
				if spec.SignalsHeld != nil {
					<-spec.SignalsHeld
				}
			})
			return werr
		}
		var code int
		// The wall is torn down while the final record is written, and
		// before postern goes on.
		var teardown sync.WaitGroup
		defer teardown.Wait()
		files, err := localFiles(store, run.ID, spec.KeepHome)
		if err == nil {
			code, err = runLocal(ctx, store, run, spec, pol, pins, carrier, Walled{
				Env: spec.Env, UpstreamRoots: spec.UpstreamRoots, Upstream: spec.Upstream,
				Files: files, NoNetwork: noNetwork, Settle: func(f func()) { teardown.Go(f) },
				InitDir: initDir(store),
			}, wait)
		}
		if time.Since(run.StartedAt) >= primeAfter {
			primeAtExit(initDir(store), spec.Logger)
		}
		if werr := wait(); werr != nil && err == nil {
			err = werr
		}
		return finish(ctx, store, run, code, err)
	}
	if err := store.PutRun(run); err != nil {
		return nil, err
	}
	var code int
	switch c {
	case carry.None:
		warnOpen(spec.Warn, run, "no wall, no door")
		if m.IsLocal() {
			if started := startedHook(spec, run); started != nil {
				started()
			}
			code, err = runOpen(ctx, spec)
		} else {
			code, err = runRemote(ctx, store, run, spec, rec, m)
		}
	case carry.NetworkWall, carry.ConnectDoor:
		code, err = runRemote(ctx, store, run, spec, rec, m)
	default:
		err = &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec), AtRunTime: fmt.Sprintf("carry %s is not available on this machine's platform", c), Fix: "run on a Linux machine"}
	}
	return finish(ctx, store, run, code, err)
}

// started tells spec.OnStart that run is starting.
func started(spec Spec, run *records.Run) {
	if spec.OnStart != nil {
		snapshot := *run
		spec.OnStart(&snapshot)
	}
}

// warnOpen tells the person that run has an open network, and how open.
func warnOpen(w io.Writer, run *records.Run, how string) {
	fmt.Fprintf(w, "postern: WARNING: run %s has an OPEN network (%s): --egress-open %q; this is recorded\n", run.ID, how, run.EgressOpenReason)
}

func measuredAt(rec *probe.Record) time.Time {
	if rec == nil {
		return time.Time{}
	}
	return rec.MeasuredAt
}

func refuse(store *records.Store, run *records.Run, err error) (*records.Run, error) {
	run.State = records.StateRefused
	run.End = records.EndRefused
	run.Carry = carry.None
	run.EndedAt = time.Now().UTC()
	run.Why = err.Error()
	if perr := store.PutRun(run); perr != nil {
		return run, errors.Join(err, perr)
	}
	return run, err
}

func finish(ctx context.Context, store *records.Store, run *records.Run, code int, err error) (*records.Run, error) {
	endLocalWorkspace(ctx, store, run) // a local copy's result comes home (workspace.go)
	run.EndedAt = time.Now().UTC()
	var ref *carry.Refusal
	var cerr *CommandError
	switch {
	case errors.As(err, &ref):
		run.State = records.StateRefused
		run.End = records.EndRefused
		run.Why = err.Error()
	case errors.Is(err, ErrRunLost):
		run.State = records.StateLost
		run.End = records.EndLost
		run.Why = err.Error()
	case errors.As(err, &cerr):
		run.State = records.StateFailed
		run.End = cerr.End()
		run.Why = err.Error()
	case err != nil:
		run.State = records.StateFailed
		run.End = records.EndStartFailed
		run.Why = err.Error()
	default:
		run.State = records.StateExited
		run.End = records.EndExited
		run.ExitCode = &code
		if code > 128 && code < 128+65 {
			run.End = records.EndSignalled
			run.Why = "ended by signal " + syscall.Signal(code-128).String()
		}
	}
	if perr := store.PutRun(run); perr != nil {
		return run, errors.Join(err, &RecordError{Run: run, Err: perr})
	}
	return run, err
}

// RecordError is a run that ended but whose final record could not be
// written, even with the room the records keep in reserve for it: the records
// still say it is running, and will show it lost.
type RecordError struct {
	Run *records.Run
	Err error
}

func (e *RecordError) Error() string {
	how := "with no exit status"
	if e.Run.ExitCode != nil {
		how = fmt.Sprintf("with exit status %d", *e.Run.ExitCode)
	}
	return fmt.Sprintf("run %s ended %s (%d allowed, %d denied) but its record could not be written: %v; the records will show it lost",
		e.Run.ID, how, e.Run.Allowed, e.Run.Denied, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// readPolicy compiles the policy file and returns the bytes it compiled,
// which the run's record keeps (and a remote run is sent).
func readPolicy(path string) (*policy.Policy, []byte, error) {
	if path == "" {
		return policy.Nothing(), nil, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read policy %q: %w", path, err)
	}
	p, err := policy.Parse(path, src)
	if err != nil {
		return nil, nil, err
	}
	return p, src, nil
}

// keepPolicy records what the run's policy file held.
func keepPolicy(run *records.Run, src []byte) {
	if src == nil {
		return
	}
	sum := sha256.Sum256(src)
	run.PolicySHA256 = hex.EncodeToString(sum[:])
	text := src
	if len(text) > records.MaxPolicyText {
		text, run.PolicyTextCut = text[:records.MaxPolicyText], true
	}
	run.PolicyText = strings.ToValidUTF8(string(text), "\uFFFD")
}

func policyName(p *policy.Policy) string {
	if p.Source == "" {
		return "(none)"
	}
	return p.Source
}

func parsePins(specs []string) (map[string][]netip.Addr, error) {
	pins := map[string][]netip.Addr{}
	for _, s := range specs {
		name, addr, err := door.ParseAddHost(s)
		if err != nil {
			return nil, err
		}
		pins[name] = append(pins[name], addr)
	}
	return pins, nil
}

func newID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}
