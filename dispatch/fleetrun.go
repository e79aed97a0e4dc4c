package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/records"
)

// FleetRunner starts a dispatch's attempts as ordinary runs: each one goes
// through Run, so it is placed, walled, refused and recorded exactly as
// 'postern run' would be, its record carrying the dispatch's id and the
// task's name, and its stdout and stderr kept in the records (the last
// records.OutputLimit bytes of each).
type FleetRunner struct {
	Store *records.Store
	// Base is what every attempt's spec starts from: ssh options, pins,
	// resolver, logger. Its command, machine, policy, streams and signals
	// are the attempt's own.
	Base Spec
	// Dir is where the dispatch was started: a local task's dir is taken
	// from it.
	Dir string
	// InWorkTree is a dispatch started inside a git work tree: each attempt
	// gets a workspace of its own (see fleetworkspace.go).
	InWorkTree bool
	// Prepare, if set, may change an attempt's spec before it runs.
	Prepare func(*Spec, fleet.Attempt)
	// OnRun, if set, sees each attempt's run record once it has ended.
	OnRun func(fleet.Attempt, *records.Run)

	mu    sync.Mutex
	gates map[string]startGate
}

// Stop steps: a cancelled attempt's run is sent SIGTERM, then SIGKILL after
// fleetKillAfter; after fleetDropAfter its connection is dropped (the remote
// agent then ends the run and its wall by itself), so that it is stopped
// within fleet.DefaultStopGrace.
const (
	fleetKillAfter = 1500 * time.Millisecond
	fleetDropAfter = 3 * time.Second
	// fleetFlushEvery is how often a run's output is written to the records.
	fleetFlushEvery = 250 * time.Millisecond
	// fleetStartsPerMachine bounds the runs of a dispatch starting at once on
	// one machine (connecting, starting the agent, raising the wall): below
	// the 10 unauthenticated connections an sshd takes at once by default
	// (MaxStartups), past which it closes new ones.
	fleetStartsPerMachine = 4
)

// fleetConnectRetries are the waits before a remote run whose machine
// turned its connection away before the run began is tried again.
var fleetConnectRetries = []time.Duration{200 * time.Millisecond, 600 * time.Millisecond}

// startGate bounds the runs starting at once on one machine.
type startGate chan struct{}

func (g startGate) acquire(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cancelled before it started: %w", ctx.Err())
	}
}

func (g startGate) release() { <-g }

// gate is the start gate of a machine.
func (r *FleetRunner) gate(name string) startGate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gates == nil {
		r.gates = map[string]startGate{}
	}
	g, ok := r.gates[name]
	if !ok {
		g = make(startGate, fleetStartsPerMachine)
		r.gates[name] = g
	}
	return g
}

// Start starts one attempt; see fleet.Runner.
func (r *FleetRunner) Start(ctx context.Context, a fleet.Attempt, report func(fleet.RunEvent)) {
	go r.run(ctx, a, report)
}

func (r *FleetRunner) run(ctx context.Context, a fleet.Attempt, report func(fleet.RunEvent)) {
	spec := r.spec(a)
	logger := spec.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	spec.ID = newID()
	var began atomic.Bool
	gate := r.gate(a.Machine.Name)
	var release func()
	spec.OnStarted = func(run *records.Run) {
		release()
		if !began.Swap(true) {
			report(fleet.RunEvent{Attempt: a.ID, Kind: fleet.RunStarted, RunID: run.ID})
		}
	}
	spec.OnEvent = func(ev door.Event) {
		if d, ok := fleet.DenialOf(ev); ok {
			report(fleet.RunEvent{Attempt: a.ID, Kind: fleet.RunDenied, RunID: spec.ID, Denial: d})
		}
	}
	out, err := newRunOutput(r.Store, spec.ID, logger)
	if err != nil {
		report(fleet.RunEvent{Attempt: a.ID, Kind: fleet.RunFailed, Err: err})
		return
	}
	spec.Stdout, spec.Stderr = out.stdout, out.stderr
	sigs := make(chan os.Signal, 4)
	spec.Signals = sigs

	// The run does not see the dispatch's cancel directly: a cancelled
	// context drops a remote run's connection, which records it lost. It is
	// stopped as a person would stop it, by signals, and its connection
	// dropped only if that does not end it.
	runCtx, drop := context.WithCancel(context.WithoutCancel(ctx))
	defer drop()
	ended := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ended:
			return
		case <-ctx.Done():
		}
		send := func(s os.Signal) {
			select {
			case sigs <- s:
			default:
			}
		}
		send(syscall.SIGTERM)
		kill, cut := time.NewTimer(fleetKillAfter), time.NewTimer(fleetDropAfter)
		defer kill.Stop()
		defer cut.Stop()
		for {
			select {
			case <-ended:
				return
			case <-kill.C:
				send(syscall.SIGKILL)
			case <-cut.C:
				drop()
			}
		}
	}()

	var (
		run    *records.Run
		runErr error
	)
	for try := 0; ; try++ {
		if err := gate.acquire(ctx); err != nil {
			runErr = err
			break
		}
		release = sync.OnceFunc(gate.release)
		run, runErr = Run(runCtx, r.Store, spec)
		release()
		// A machine that turned the connection away before the run began
		// (an sshd busy with other connections closes some at once) is
		// asked again, under the same run id, before it counts as lost.
		var ref *carry.Refusal
		var perr *PolicyError
		// A run with no record failed before anything reached the machine
		// (its policy, its env): no machine would take it.
		again := runErr != nil && run != nil && !began.Load() && !a.Machine.IsLocal() && ctx.Err() == nil &&
			!errors.As(runErr, &ref) && !errors.As(runErr, &perr) && try < len(fleetConnectRetries)
		if !again {
			break
		}
		logger.Debug("machine did not take the run; asking again", "run", spec.ID, "machine", a.Machine.Name, "err", runErr)
		select {
		case <-ctx.Done():
		case <-time.After(fleetConnectRetries[try]):
		}
	}
	close(ended)
	<-stopped
	out.close()

	cancelled := ctx.Err() != nil
	ev := fleet.RunEvent{Attempt: a.ID, RunID: spec.ID}
	var ref *carry.Refusal
	var perr *PolicyError
	switch {
	case errors.As(runErr, &ref), errors.As(runErr, &perr):
		ev.Kind, ev.Err = fleet.RunFailed, runErr
	case errors.Is(runErr, ErrRunLost) && !cancelled:
		ev.Kind, ev.Err = fleet.RunLost, runErr
	case runErr != nil && run != nil && !a.Machine.IsLocal() && !cancelled && !began.Load():
		// The machine could not be reached to begin the run (ssh refused,
		// timed out, its agent would not answer): the machine is what
		// dropped, not the task.
		ev.Kind, ev.Err = fleet.RunLost, fmt.Errorf("machine %s could not be reached: %w", a.Machine.Name, runErr)
		run.State, run.Why = records.StateLost, ev.Err.Error()
		r.put(run, logger)
	case runErr != nil:
		ev.Kind, ev.Err = fleet.RunFailed, runErr
	case run.ExitCode != nil:
		ev.Kind, ev.Code, ev.Branch = fleet.RunExited, *run.ExitCode, resultBranch(run)
	default:
		ev.Kind, ev.Err = fleet.RunFailed, errors.New("the run ended with no exit status")
	}
	if cancelled && run != nil && run.State != records.StateRefused {
		run.State = records.StateCancelled
		run.Why = "stopped by its dispatch, which was cancelled"
		if errors.Is(context.Cause(ctx), fleet.ErrTimedOut) {
			run.State = records.StateFailed
			run.Why = fmt.Sprintf("stopped by its dispatch: its task's timeout (%s) passed", a.Task.Timeout)
		}
		if runErr != nil {
			run.Why += ": " + runErr.Error()
		}
		r.put(run, logger)
	}
	if r.OnRun != nil && run != nil {
		r.OnRun(a, run)
	}
	report(ev)
}

func (r *FleetRunner) put(run *records.Run, logger *slog.Logger) {
	if err := r.Store.PutRun(run); err != nil {
		logger.Warn("record the run's end", "run", run.ID, "err", err)
	}
}

// spec is the attempt's run as 'postern run' would be given it.
func (r *FleetRunner) spec(a fleet.Attempt) Spec {
	spec := r.Base
	spec.Machine = a.Machine.Name
	spec.PolicyPath = a.Task.Policy
	spec.Command = slices.Clone(a.Task.Command)
	spec.Dispatch, spec.Task = a.Dispatch, a.Task.Name
	spec.Env = slices.Clone(r.Base.Env)
	// The task's env, on top of what the person passed (--env's way).
	spec.PassEnv = append(slices.Clone(r.Base.PassEnv), EnvPairs(a.Task.Env)...)
	switch a.Task.Network {
	case fleet.NetworkNone:
		spec.Network = NetworkNone
		spec.PolicyPath = ""
	case fleet.NetworkOpen:
		spec.EgressOpen = a.Task.Reason
	}
	if a.Task.Container != "" {
		// A run with no network takes a container with none (Run sees to it).
		spec.Container.Image = a.Task.Container
	}
	spec.Stdin = nil
	// Where the command starts; on a remote machine, where in the work
	// its workspace takes along it starts.
	spec.Dir = r.Dir
	if a.Task.Dir != "" {
		spec.Dir = filepath.Join(r.Dir, a.Task.Dir)
	}
	attemptWorkspace(&spec, a.Machine.IsLocal(), r.InWorkTree)
	if r.Prepare != nil {
		r.Prepare(&spec, a)
	}
	return spec
}

// runOutput carries a run's stdout and stderr into the records: each is a
// pipe the run writes, read here and written to the records in batches.
type runOutput struct {
	store          *records.Store
	run            string
	logger         *slog.Logger
	stdout, stderr *os.File
	mu             sync.Mutex
	pending        map[string][]byte
	stop           chan struct{}
	wg             sync.WaitGroup
	readers        sync.WaitGroup
}

func newRunOutput(store *records.Store, run string, logger *slog.Logger) (*runOutput, error) {
	o := &runOutput{store: store, run: run, logger: logger, pending: map[string][]byte{}, stop: make(chan struct{})}
	for _, stream := range []string{records.Stdout, records.Stderr} {
		pr, pw, err := os.Pipe()
		if err != nil {
			o.closeWriters()
			return nil, fmt.Errorf("run %s: a pipe for its %s: %w", run, stream, err)
		}
		if stream == records.Stdout {
			o.stdout = pw
		} else {
			o.stderr = pw
		}
		o.readers.Add(1)
		go o.read(pr, stream)
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(fleetFlushEvery)
		defer t.Stop()
		for {
			select {
			case <-o.stop:
				return
			case <-t.C:
				o.flush(false)
			}
		}
	}()
	return o, nil
}

func (o *runOutput) read(pr *os.File, stream string) {
	defer o.readers.Done()
	defer pr.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			o.mu.Lock()
			p := append(o.pending[stream], buf[:n]...)
			if len(p) > records.OutputLimit {
				p = p[len(p)-records.OutputLimit:]
			}
			o.pending[stream] = p
			o.mu.Unlock()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				o.logger.Warn("read the run's output", "run", o.run, "stream", stream, "err", err)
			}
			return
		}
	}
}

// flush writes what the run wrote since the last flush, in one durable
// write; done marks the output complete.
func (o *runOutput) flush(done bool) {
	o.mu.Lock()
	pending := o.pending
	o.pending = map[string][]byte{}
	o.mu.Unlock()
	if err := o.store.KeepOutput(o.run, pending, done); err != nil {
		o.logger.Warn("keep the run's output", "run", o.run, "err", err)
	}
}

func (o *runOutput) closeWriters() {
	if o.stdout != nil {
		o.stdout.Close()
	}
	if o.stderr != nil {
		o.stderr.Close()
	}
}

// close ends the streams once the run has ended: what the run's processes
// still hold of the pipes is theirs (they are gone once the run is), so the
// readers get their EOF; then the last output is written.
func (o *runOutput) close() {
	o.closeWriters()
	done := make(chan struct{})
	go func() { o.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	close(o.stop)
	o.wg.Wait()
	o.flush(true)
}

// startedHook is what Run calls once the command has started: the spec's
// OnStarted with the run's record.
func startedHook(spec Spec, run *records.Run) func() {
	if spec.OnStarted == nil {
		return nil
	}
	return func() {
		snap := *run
		spec.OnStarted(&snap)
	}
}
