package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

// killGrace is how long a run has between SIGTERM and SIGKILL when postern itself is
// told to stop.
const killGrace = 5 * time.Second

// proxyVariables are dropped from a walled run's environment: the wall needs none,
// and a proxy address inherited from the person's shell would only be denied.
var proxyVariables = []string{"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy", "grpc_proxy"}

func walledEnv(env []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		for _, p := range proxyVariables {
			if strings.EqualFold(k, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

func runWalled(ctx context.Context, store *records.Store, run *records.Run, spec Spec, pol *policy.Policy, pins map[string][]netip.Addr) (int, error) {
	stdin, stdout, stderr := spec.Stdin, spec.Stdout, spec.Stderr
	var tty *terminal
	if isTerminal(stdin) {
		t, err := openTerminal(stdin, stdout)
		if err != nil {
			return 0, err
		}
		tty = t
		defer tty.close()
		stdin, stdout, stderr = t.slave, t.slave, t.slave
	}
	wall, err := netwall.Raise(ctx, netwall.Spec{
		Command: spec.Command,
		Dir:     spec.Dir,
		Env:     walledEnv(spec.Env),
		Ports:   pol.Ports,
		Stdin:   stdin,
		Stdout:  stdout,
		Stderr:  stderr,
		TTY:     tty != nil,
		Logger:  spec.Logger,
	})
	if err != nil {
		var kerr *netwall.KernelError
		if errors.As(err, &kerr) {
			return 0, &carry.Refusal{Lane: run.Lane, Machine: run.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + run.Machine + "' again"}
		}
		return 0, fmt.Errorf("raise the network wall: %w", err)
	}
	defer wall.Close()

	evlog := store.NewEventLog(run.ID, spec.OnEvent)
	d, err := door.New(door.Config{Policy: pol.WithSelf(netwall.RunAddrs()...), Resolver: spec.Resolver, AddHosts: pins, Emit: evlog.Emit, Run: run.ID, Logger: spec.Logger})
	if err != nil {
		_ = evlog.Close(ctx)
		return 0, fmt.Errorf("start the door: %w", err)
	}
	// The door outlives a cancelled ctx long enough to drain; it is stopped below.
	doorCtx, stopDoor := context.WithCancel(context.WithoutCancel(ctx))
	doorDone := make(chan error, 1)
	go func() { doorDone <- d.Run(doorCtx, wall.Listeners()) }()

	code, runErr := superviseWall(ctx, wall, tty, spec.Signals)

	stopDoor()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	var doorErr error
	select {
	case doorErr = <-doorDone:
	case <-tctx.Done():
		doorErr = fmt.Errorf("the door did not stop within %s", teardownTimeout)
	}
	logErr := evlog.Close(tctx)
	run.Allowed, run.Denied, run.WouldDeny = evlog.Counts()
	if runErr != nil {
		return code, runErr
	}
	if err := errors.Join(doorErr, logErr); err != nil {
		spec.Logger.Warn("run teardown", "run", run.ID, "err", err)
		fmt.Fprintf(spec.Warn, "postern: run %s: %v\n", run.ID, err)
	}
	return code, nil
}

// superviseWall starts the walled command and waits for it, forwarding signals. When
// ctx is done the run gets SIGTERM, then SIGKILL after killGrace.
func superviseWall(ctx context.Context, wall *netwall.Wall, tty *terminal, signals <-chan os.Signal) (int, error) {
	if err := wall.Start(); err != nil {
		return 0, fmt.Errorf("start the run inside the wall: %w", err)
	}
	if tty != nil {
		if err := tty.start(); err != nil {
			_ = wall.Signal(syscall.SIGKILL)
		}
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
			killTimer = time.After(killGrace)
		case <-killTimer:
			_ = wall.Signal(syscall.SIGKILL)
			_ = wall.Close()
		}
	}
}

// runOpen runs the command with no wall: the person asked for it with --egress-open.
func runOpen(ctx context.Context, spec Spec) (int, error) {
	path, err := exec.LookPath(spec.Command[0])
	if err != nil {
		return 127, fmt.Errorf("find %q: %w", spec.Command[0], err)
	}
	cmd := &exec.Cmd{Path: path, Args: spec.Command, Dir: spec.Dir, Env: spec.Env,
		Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %q: %w", spec.Command[0], err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	done := ctx.Done()
	var killTimer <-chan time.Time
	for {
		select {
		case err := <-waited:
			return exitCode(cmd.ProcessState, err)
		case sig := <-spec.Signals:
			if sig != syscall.SIGWINCH {
				_ = cmd.Process.Signal(sig)
			}
		case <-done:
			done = nil
			_ = cmd.Process.Signal(syscall.SIGTERM)
			killTimer = time.After(killGrace)
		case <-killTimer:
			_ = cmd.Process.Kill()
		}
	}
}

func exitCode(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 0, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}
