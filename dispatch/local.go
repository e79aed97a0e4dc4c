package dispatch

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

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

// runWalled runs a local walled run. recorded returns once the running record is
// durable; the command does not start before.
func runWalled(ctx context.Context, store *records.Store, run *records.Run, spec Spec, pol *policy.Policy, pins map[string][]netip.Addr, recorded func() error) (int, error) {
	evlog := store.NewEventLog(run.ID, spec.OnEvent)
	code, runErr := RunWalled(ctx, Walled{
		Run: run.ID, Machine: run.Machine, Lane: run.Lane,
		Command: spec.Command, Dir: spec.Dir, Env: spec.Env,
		Policy: pol, Pins: pins, Resolver: spec.Resolver,
		Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr,
		Signals: spec.Signals, Emit: evlog.Emit,
		BeforeStart: recorded,
		Logger:      spec.Logger, Warn: spec.Warn,
	})
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	logErr := evlog.Close(tctx)
	run.Allowed, run.Denied, run.WouldDeny = evlog.Counts()
	if runErr != nil {
		return code, runErr
	}
	if logErr != nil {
		spec.Logger.Warn("run teardown", "run", run.ID, "err", logErr)
		fmt.Fprintf(spec.Warn, "postern: run %s: %v\n", run.ID, logErr)
	}
	return code, nil
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
