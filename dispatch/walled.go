package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
)

// Walled is one command behind the network wall with the door beside it. A local
// run and the remote agent both run it: only where the streams and the events go
// differs.
type Walled struct {
	Run     string // the run's id, copied into every event
	Machine string
	Lane    string

	Command []string
	Dir     string
	Env     []string // proxy variables are dropped

	Policy   *policy.Policy
	Pins     map[string][]netip.Addr
	Resolver string
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
	Emit func(door.Event)
	// KillGrace is how long the run has between SIGTERM and SIGKILL once ctx is
	// done; zero means 5s.
	KillGrace time.Duration
	// BeforeStart, if set, is called once the wall is up, before the command
	// starts; an error ends the run there.
	BeforeStart func() error
	// OnStart, if set, is called once the command runs inside the wall.
	OnStart func()
	// Landlock also confines the command with Landlock, where the kernel has
	// network rules: TCP connect only to the policy's ports and DNS.
	Landlock bool

	// NeverWritable are more of postern's own places the run may not write
	// (the agent's directory); the connect-door carry guards them.
	NeverWritable []string

	Logger *slog.Logger
	Warn   io.Writer // teardown problems meant for the person
	// OnGuarded, when set, receives what warnGuarded told the person.
	OnGuarded func(guarded []string)
}

// RunWalled raises the wall, serves the door on its listeners, starts the command
// and waits for it. When ctx is done the run gets SIGTERM, then SIGKILL after
// KillGrace. It returns the command's exit status (128+n for signal n). A wall the
// kernel refuses is a *carry.Refusal.
func RunWalled(ctx context.Context, w Walled) (int, error) {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Warn == nil {
		w.Warn = io.Discard
	}
	if w.Emit == nil {
		w.Emit = func(door.Event) {}
	}
	if w.KillGrace <= 0 {
		w.KillGrace = killGrace
	}
	if w.Policy == nil {
		w.Policy = policy.Nothing()
	}
	// In observe mode every TCP port leads to the door, which lets through
	// what the floor allows and records what enforce would refuse.
	observe := w.Policy.Mode == policy.Observe
	if w.Landlock && !observe {
		w.Env = append(w.Env[:len(w.Env):len(w.Env)], netwall.LandlockConnectEnv(w.Policy.Ports))
	}
	stdin, stdout, stderr := w.Stdin, w.Stdout, w.Stderr
	var tty *terminal
	ownTTY := w.OwnTerminal && isTerminal(stdin)
	if !ownTTY {
		var err error
		if stdin, stdout, stderr, tty, err = runTerminal(w.Stdin, w.Stdout, w.Stderr); err != nil {
			return 0, err
		}
	}
	if tty != nil {
		defer tty.close()
	}
	wall, err := netwall.Raise(ctx, netwall.Spec{
		Command: w.Command,
		Dir:     w.Dir,
		Env:     walledEnv(w.Env),
		Ports:   w.Policy.Ports,
		AllTCP:  observe,
		Stdin:   stdin,
		Stdout:  stdout,
		Stderr:  stderr,
		TTY:     ownTTY || (tty != nil && tty.keys != nil),
		Logger:  w.Logger,
	})
	if err != nil {
		var kerr *netwall.KernelError
		if errors.As(err, &kerr) {
			return 0, &carry.Refusal{Lane: w.Lane, Machine: w.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + w.Machine + "' again"}
		}
		return 0, fmt.Errorf("raise the network wall: %w", err)
	}
	defer wall.Close()

	if w.BeforeStart != nil {
		if err := w.BeforeStart(); err != nil {
			return 0, err
		}
	}
	cfg := door.Config{Policy: w.Policy, Resolver: w.Resolver, AddHosts: w.Pins, Emit: w.Emit, Run: w.Run, Logger: w.Logger, Upstream: w.Upstream}
	code, runErr, doorErr := withDoor(ctx, wall.Listeners(), cfg, func() (int, error) {
		return superviseWall(ctx, wall, tty, w.Signals, w.KillGrace, w.OnStart)
	})
	if changes := wall.GuardChanges(); len(changes) > 0 {
		guarded := make([]string, len(changes))
		for i, c := range changes {
			w.Logger.Info("guarded path changed by the run", "run", w.Run, "path", c.Path, "what", c.What)
			guarded[i] = c.String()
		}
		warnGuarded(w.Warn, w.Run, guarded)
		if w.OnGuarded != nil {
			w.OnGuarded(guarded)
		}
	}
	if runErr != nil {
		return code, runErr
	}
	if doorErr != nil {
		w.Logger.Warn("run teardown", "run", w.Run, "err", doorErr)
		fmt.Fprintf(w.Warn, "postern: run %s: %v\n", w.Run, doorErr)
	}
	return code, nil
}

// warnGuarded tells the person, once the run is over, about each file that
// programs outside the wall obey and the run made, replaced or changed (see
// netwall.Wall.GuardChanges).
func warnGuarded(w io.Writer, run string, guarded []string) {
	for _, g := range guarded {
		fmt.Fprintf(w, "postern: run %s: %s. Programs outside the wall obey it (a shell at login, git, ssh, systemd): if you did not make this change, read it before they do.\n", run, g)
	}
}

// withDoor serves a door on a wall's listeners while body runs the walled
// command, then stops the door, giving open connections a bounded drain. The
// door floors the run's own addresses. It returns body's results and what went
// wrong with the door.
func withDoor(ctx context.Context, ls door.Listeners, cfg door.Config, body func() (int, error)) (int, error, error) {
	cfg.Policy = cfg.Policy.WithSelf(netwall.RunAddrs()...)
	d, err := door.New(cfg)
	if err != nil {
		return 0, fmt.Errorf("start the door: %w", err), nil
	}
	// The door outlives a cancelled ctx long enough to drain; it is stopped below.
	doorCtx, stopDoor := context.WithCancel(context.WithoutCancel(ctx))
	doorDone := make(chan error, 1)
	go func() { doorDone <- d.Run(doorCtx, ls) }()

	code, runErr := body()

	stopDoor()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	select {
	case err = <-doorDone:
	case <-tctx.Done():
		err = fmt.Errorf("the door did not stop within %s", teardownTimeout)
	}
	return code, runErr, err
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

// walledCommand is a command behind a wall: a *netwall.Wall, or a
// *container.Wall (see container.go).
type walledCommand interface {
	Start() error
	Signal(syscall.Signal) error
	Wait() (int, error)
	Close() error
}

// superviseWall starts the walled command and waits for it, forwarding signals. When
// ctx is done the run gets SIGTERM, then SIGKILL after grace.
func superviseWall(ctx context.Context, wall walledCommand, tty *terminal, signals <-chan os.Signal, grace time.Duration, onStart func()) (int, error) {
	if err := wall.Start(); err != nil {
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
