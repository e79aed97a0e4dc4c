package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

// Walled is one command behind the network wall with the door beside it. A local
// run and the remote agent both run it: only where the streams and the events go
// differs.
type Walled struct {
	Run     string // the run's id, copied into every event
	Machine string
	Lane    machine.Lane

	Command []string
	Dir     string
	Env     []string // proxy variables are dropped

	Policy   *policy.Policy
	Pins     map[string][]netip.Addr
	Resolver string
	// UpstreamRoots is a PEM file of authorities the door trusts, besides
	// the machine's, when it verifies a host the policy inspects.
	UpstreamRoots string
	// Upstream, when set, is the gateway the door sends every connection
	// on to; Policy then gives only the ports.
	Upstream *door.Upstream

	// Stdin, Stdout and Stderr are the run's streams; a terminal on Stdin gets the
	// run its own pseudo-terminal with Stdin's size.
	Stdin, Stdout, Stderr *os.File
	// OwnTerminal says the streams are one pseudo-terminal opened for this run
	// alone (the remote agent's), not the person's: the wall takes it as it is,
	// with no second pseudo-terminal between, and its resizes reach the wall
	// directly.
	OwnTerminal bool
	// Signals are forwarded to the run; SIGWINCH resizes its terminal.
	Signals <-chan os.Signal
	// Emit receives every event of the door. It must not block for long.
	Emit func(event.Event)
	// KillGrace is how long the run has between SIGTERM and SIGKILL once ctx is
	// done; zero means 5s.
	KillGrace time.Duration
	// BeforeStart, if set, is called once the wall is up, before the command
	// starts; an error ends the run there.
	BeforeStart func() error
	// OnStart, if set, is called once the command runs inside the wall.
	OnStart func()
	// OnPid, if set, is told the pid of the wall's process (the root of the
	// run's tree, on this machine), before OnStart.
	OnPid func(pid int)
	// Landlock also confines the command with Landlock, where the kernel has
	// network rules: TCP connect only to the policy's ports and DNS.
	Landlock bool

	// NeverWritable are more of postern's own places the run may not write
	// (the agent's directory); the connect-door carry guards them.
	NeverWritable []string
	// Files is what the run may do with the host's files (see netwall.Files):
	// the policy's writable, deny_read and allow_read are added to it.
	Files netwall.Files
	// PidsLimit overrides the policy's pids_limit when set.
	PidsLimit int
	// Where names the machine in what the person is told about the run's
	// writes ("" for this one).
	Where string
	// NoNetwork runs the command with no network at all: only lo, no door,
	// no DNS (--network none).
	NoNetwork bool

	Logger *slog.Logger
	Warn   io.Writer // teardown problems meant for the person
	// OnWrites, when set, receives what tellWrites told the person.
	OnWrites func(lines []string)
}

// RunWalled raises the wall, serves the door on its listeners, starts the command
// and waits for it. When ctx is done the run gets SIGTERM, then SIGKILL after
// KillGrace. It returns the command's exit status (128+n for signal n). A wall the
// kernel refuses is a *carry.Refusal.
func RunWalled(ctx context.Context, w Walled) (int, error) {
	w.fillDefaults()
	// In observe mode every TCP port leads to the door, which lets through
	// what the floor allows and records what enforce would refuse.
	observe := w.Policy.Mode == policy.Observe
	ports := wallPorts(w.Policy)
	if w.NoNetwork {
		ports = nil
	} else {
		// The run is pointed at its guardrails, which it reaches through
		// the door on their ports.
		w.Env = withGuardrails(w.Env, w.Policy, false)
	}
	if w.Landlock && !observe && !w.NoNetwork {
		w.Env = append(w.Env[:len(w.Env):len(w.Env)], netwall.LandlockConnectEnv(ports))
	}
	stdin, stdout, stderr, tty, ownTTY, err := w.streams()
	if err != nil {
		return 0, err
	}
	if tty != nil {
		defer tty.close()
	}
	pids := w.PidsLimit
	if pids <= 0 {
		pids = w.Policy.PidsLimit
	}
	// The run trusts the authority the door shows inspected hosts with;
	// what postern reads injected headers from stays out of its reach.
	ca, err := inspectAuthority(w.Policy)
	if err != nil {
		return 0, err
	}
	var trust []byte
	if ca != nil {
		trust = ca.CertPEM()
	}
	wall, err := netwall.Raise(ctx, netwall.Spec{
		Command:   w.Command,
		Dir:       w.Dir,
		Env:       walledEnv(withoutInjected(w.Env, w.Policy)),
		TrustPEM:  trust,
		Hide:      w.Policy.InjectFiles(),
		Ports:     ports,
		AllTCP:    observe && !w.NoNetwork,
		NoNetwork: w.NoNetwork,
		Stdin:     stdin,
		Stdout:    stdout,
		Stderr:    stderr,
		TTY:       ownTTY || (tty != nil && tty.keys != nil),
		Files:     policyFiles(w.Files, w.Policy),
		PidsLimit: pids,
		Logger:    w.Logger,
	})
	if err != nil {
		var kerr *netwall.KernelError
		var perr *netwall.PlaceError
		if errors.As(err, &perr) {
			// Refused before anything was spawned: a place the run may not
			// have, named by the policy (its position first) or not.
			if perr.Pos != "" {
				return 0, &PolicyError{perr}
			}
			return 0, perr
		}
		if errors.As(err, &kerr) {
			return 0, &carry.Refusal{Lane: w.Lane, Machine: w.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + w.Machine + "' again"}
		}
		return 0, fmt.Errorf("raise the network wall: %w", err)
	}
	defer wall.Close()
	if lim := wall.PidsLimit(); strings.HasPrefix(lim, "none") {
		fmt.Fprintf(w.Warn, "postern: run %s: its processes are not limited: %s\n", w.Run, lim)
	}

	if w.BeforeStart != nil {
		if err := w.BeforeStart(); err != nil {
			return 0, err
		}
	}
	// On a network wall the guardrails' seal is held: their hosts are
	// denied whatever else the policy says.
	cfg := door.Config{Policy: w.Policy, Resolver: w.Resolver, AddHosts: w.Pins, Emit: w.Emit, Run: w.Run, Logger: w.Logger,
		Authority: ca, UpstreamRoots: w.UpstreamRoots, Upstream: w.Upstream, Seal: len(w.Policy.Guardrails) > 0}
	var e walledExit
	if w.OnPid != nil {
		onStart := w.OnStart
		w.OnStart = func() {
			w.OnPid(wall.Pid())
			if onStart != nil {
				onStart()
			}
		}
	}
	if w.NoNetwork {
		e.code, e.err = superviseWall(ctx, wall, tty, w.Signals, w.KillGrace, w.OnStart)
	} else {
		e = withDoor(ctx, wall.Listeners(), cfg, func() (int, error) {
			return superviseWall(ctx, wall, tty, w.Signals, w.KillGrace, w.OnStart)
		})
	}
	if lines := writeLines(wall.Ending(), w.Where); len(lines) > 0 {
		for _, l := range lines {
			w.Logger.Info("run's writes", "run", w.Run, "what", l)
		}
		tellWrites(w.Warn, w.Run, lines)
		if w.OnWrites != nil {
			w.OnWrites(lines)
		}
	}
	if e.err != nil {
		return e.code, e.err
	}
	e.tellTeardown(w.Logger, w.Warn, w.Run)
	return e.code, nil
}

// fillDefaults fills what w leaves unset: no logs, no warnings, no events
// kept, the default kill grace, a policy that allows nothing.
func (w *Walled) fillDefaults() {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Warn == nil {
		w.Warn = io.Discard
	}
	if w.Emit == nil {
		w.Emit = func(event.Event) {}
	}
	if w.KillGrace <= 0 {
		w.KillGrace = killGrace
	}
	if w.Policy == nil {
		w.Policy = policy.Nothing()
	}
}

// streams are the run's streams (see runTerminal), unless w's streams are
// the run's own terminal already (ownTTY).
func (w *Walled) streams() (stdin, stdout, stderr *os.File, tty *terminal, ownTTY bool, err error) {
	stdin, stdout, stderr = w.Stdin, w.Stdout, w.Stderr
	ownTTY = w.OwnTerminal && isTerminal(stdin)
	if !ownTTY {
		if stdin, stdout, stderr, tty, err = runTerminal(w.Stdin, w.Stdout, w.Stderr); err != nil {
			return nil, nil, nil, nil, false, err
		}
	}
	return stdin, stdout, stderr, tty, ownTTY, nil
}

// policyFiles adds the policy's writable, deny_read and allow_read to f.
func policyFiles(f netwall.Files, p *policy.Policy) netwall.Files {
	places := func(rs []policy.PathRule) []netwall.Place {
		out := make([]netwall.Place, len(rs))
		for i, r := range rs {
			out[i] = netwall.Place{Path: r.Text, Pos: r.Pos}
		}
		return out
	}
	f.Writable = append(slices.Clone(f.Writable), places(p.Writable)...)
	f.DenyRead = append(slices.Clone(f.DenyRead), places(p.DenyRead)...)
	f.AllowRead = append(slices.Clone(f.AllowRead), places(p.AllowRead)...)
	return f
}

// writeLines says, one sentence each, what became of a run's writes that did
// not reach the host as written; where names the machine ("" for this one).
func writeLines(e netwall.Ending, where string) []string {
	var out []string
	for _, d := range e.Discarded {
		out = append(out, "discarded "+d.String())
	}
	on := ""
	if where != "" {
		on = " on machine " + where
	}
	if e.HomeWrites > 0 {
		some := strings.Join(e.HomeSample, ", ")
		if e.HomeWrites > len(e.HomeSample) {
			some += ", ..."
		}
		what := fmt.Sprintf("%d file(s) it wrote in the home outside its writable places (%s)", e.HomeWrites, some)
		if e.Kept != "" {
			out = append(out, fmt.Sprintf("%s were kept in %s%s", what, e.Kept, on))
		} else {
			out = append(out, what+" were discarded; --keep-home keeps them, writable in the policy lets them through")
		}
	} else if e.Kept != "" {
		out = append(out, fmt.Sprintf("its home's private layer is kept in %s%s", e.Kept, on))
	}
	for _, p := range e.Problems {
		out = append(out, "could not bring a write home: "+p)
	}
	return out
}

// tellWrites tells the person, once the run is over, what became of its
// writes that did not reach the host as written.
func tellWrites(w io.Writer, run string, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "postern: run %s: %s\n", run, l)
	}
}

// walledExit is how a walled command ended: its exit status, or why it
// could not run (err), and apart from that what went wrong stopping its
// door, which is the person's to know and not the run's result.
type walledExit struct {
	code     int
	err      error
	teardown error
}

// tellTeardown logs a teardown problem and tells the person.
func (e walledExit) tellTeardown(logger *slog.Logger, warn io.Writer, run string) {
	if e.teardown == nil {
		return
	}
	logger.Warn("run teardown", "run", run, "err", e.teardown)
	fmt.Fprintf(warn, "postern: run %s: %v\n", run, e.teardown)
}

// withDoor serves a door on a wall's listeners while body runs the walled
// command, then stops the door, giving open connections a bounded drain. The
// door floors the run's own addresses.
func withDoor(ctx context.Context, ls door.Listeners, cfg door.Config, body func() (int, error)) walledExit {
	cfg.Policy = cfg.Policy.WithSelf(netwall.RunAddrs()...)
	d, err := door.New(cfg)
	if err != nil {
		return walledExit{err: fmt.Errorf("start the door: %w", err)}
	}
	// The door outlives a cancelled ctx long enough to drain; it is stopped below.
	doorCtx, stopDoor := context.WithCancel(context.WithoutCancel(ctx))
	doorDone := make(chan error, 1)
	go func() { doorDone <- d.Run(doorCtx, ls) }()

	var e walledExit
	e.code, e.err = body()

	stopDoor()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	select {
	case e.teardown = <-doorDone:
	case <-tctx.Done():
		e.teardown = fmt.Errorf("the door did not stop within %s", teardownTimeout)
	}
	return e
}

// runTerminal decides the run's streams. Every stream that is one of the person's
// terminals is replaced by the run's own pseudo-terminal, never handed in: through
// a terminal passed as stdout the run could change the person's terminal (stty
// -echo) or, where the descriptor is readable, read the keys they type. A stream
// that is a file or a pipe stays one, so 'postern run -- make > log' keeps stderr
// on the screen. The run's terminal copies output to the person's; with stdin a
// terminal it also takes keys and is the run's controlling terminal.
func runTerminal(stdin, stdout, stderr *os.File) (in, out, errOut *os.File, tty *terminal, err error) {
	in, out, errOut = stdin, stdout, stderr
	inTTY, outTTY, errTTY := isTerminal(stdin), isTerminal(stdout), isTerminal(stderr)
	if !inTTY && !outTTY && !errTTY {
		return in, out, errOut, nil, nil
	}
	var keys *os.File
	if inTTY {
		keys = stdin
	}
	screen := stdin
	switch {
	case outTTY:
		screen = stdout
	case errTTY:
		screen = stderr
	}
	tty, err = openTerminal(keys, screen)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if inTTY {
		in = tty.slave
	}
	if outTTY {
		out = tty.slave
	}
	if errTTY {
		errOut = tty.slave
	}
	return in, out, errOut, tty, nil
}

// superviseWall starts the walled command and waits for it, forwarding signals. When
// ctx is done the run gets SIGTERM, then SIGKILL after grace.
func superviseWall(ctx context.Context, wall carry.Wall, tty *terminal, signals <-chan os.Signal, grace time.Duration, onStart func()) (int, error) {
	if err := wall.Start(ctx); err != nil {
		return 0, fmt.Errorf("start the run inside the wall: %w", err)
	}
	if tty != nil {
		if err := tty.start(); err != nil {
			_ = wall.Signal(syscall.SIGKILL)
		}
	}
	if onStart != nil {
		onStart()
	}
	type exit struct {
		code int
		err  error
	}
	waited := make(chan exit, 1)
	go func() {
		code, err := wall.Wait()
		waited <- exit{code, err}
	}()
	var killTimer <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case e := <-waited:
			if tty != nil {
				tty.wait()
			}
			return e.code, e.err
		case sig := <-signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			if s == syscall.SIGWINCH {
				if tty != nil {
					tty.resize()
				}
				continue
			}
			_ = wall.Signal(s)
		case <-done:
			done = nil
			_ = wall.Signal(syscall.SIGTERM)
			killTimer = time.After(grace)
		case <-killTimer:
			_ = wall.Signal(syscall.SIGKILL)
			_ = wall.Close()
		}
	}
}
