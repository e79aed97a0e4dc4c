package dispatch

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/dispatch/workspace"
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

// runLocal takes a local run from its carrier to its exit: the wall raised
// through carrier, the door beside it, its events recorded and counted on
// run. w holds what only some lanes set (a container's environment); the
// rest comes from spec. recorded, if set, returns once the running record is
// durable; the command does not start before.
func runLocal(ctx context.Context, store *records.Store, run *records.Run, spec Spec, pol *policy.Policy, pins map[string][]netip.Addr,
	carrier carry.Carrier, w Walled, recorded func() error) (int, error) {
	evlog := newEventLog(store, run, spec)
	w.Carrier = carrier
	w.Run, w.Machine, w.Lane = run.ID, run.Machine, run.Lane
	w.Command, w.Dir = spec.Command, spec.Dir
	w.Policy, w.Pins, w.Resolver = pol, pins, spec.Resolver
	w.Stdin, w.Stdout, w.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	w.Signals, w.Emit = spec.Signals, evlog.Emit
	w.BeforeStart = recorded
	w.Logger, w.Warn = spec.Logger, spec.Warn
	w.PidsLimit = spec.PidsLimit
	w.OnWrites = func(lines []string) { run.Writes = lines }
	w.OnPid = func(pid int) { run.RunPid = pid }
	w.OnStart = startedHook(spec, run)
	code, runErr := RunWalled(ctx, w)
	logErr := closeEventLog(ctx, evlog, run)
	if runErr != nil {
		return code, runErr
	}
	if logErr != nil {
		spec.Logger.Warn("run teardown", "run", run.ID, "err", logErr)
		fmt.Fprintf(spec.Warn, "postern: run %s: %v\n", run.ID, logErr)
	}
	return code, nil
}

// localFiles are what a local run may never write: the records (POSTERN_HOME)
// are masked, this binary and the agents it installs on other machines held
// read-only where the run writes. With keep, the home's private layer is kept
// under the records' directory, in kept/RUN.
func localFiles(store *records.Store, run string, keep bool) (netwall.Files, error) {
	state := filepath.Dir(store.Path())
	f := netwall.Files{Protect: []string{state}, Guard: workspaceGuard()}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		f.ReadOnly = append(f.ReadOnly, exe, filepath.Join(filepath.Dir(exe), "agents"))
	}
	if d := os.Getenv("POSTERN_AGENT_DIR"); d != "" {
		f.ReadOnly = append(f.ReadOnly, d)
	}
	if keep {
		f.KeepHome = filepath.Join(state, "kept", run)
		if err := os.MkdirAll(f.KeepHome, 0o700); err != nil {
			return f, fmt.Errorf("make the directory to keep the run's home in: %w", err)
		}
	}
	return f, nil
}

// workspaceGuard are the workspaces' places on this machine, which no
// writable place of a run's may hold: the repositories' cache (other runs
// check out from it) and the runs' copies (other runs' work trees).
func workspaceGuard() []string {
	p, err := workspace.DefaultPlaces()
	if err != nil {
		return nil
	}
	return []string{p.Cache, p.Runs}
}

// runOpen runs the command with no wall: the person asked for it with --egress-open.
func runOpen(ctx context.Context, spec Spec) (int, error) {
	return runOpenCmd(ctx, openRun{Command: spec.Command, Dir: spec.Dir, Env: spec.Env,
		Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, Signals: spec.Signals})
}

// openRun is a command run with no wall.
type openRun struct {
	Command               []string
	Dir                   string
	Env                   []string
	Stdin, Stdout, Stderr *os.File
	Signals               <-chan os.Signal
	KillGrace             time.Duration // 0: killGrace
	// OwnSession puts the command in a session of its own, with Stdin as its
	// controlling terminal when TTY; its whole process group is signalled and,
	// once the command ends, killed. For an agent's run, whose caller is not
	// at this machine's terminal.
	OwnSession, TTY bool
}

// runOpenCmd runs o to its end, forwarding signals, and on ctx's end sends
// SIGTERM, then SIGKILL after the grace.
func runOpenCmd(ctx context.Context, o openRun) (int, error) {
	path := o.Command[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return 127, fmt.Errorf("find %q: %w", o.Command[0], err)
		}
		path = p
	}
	grace := o.KillGrace
	if grace <= 0 {
		grace = killGrace
	}
	cmd := &exec.Cmd{Path: path, Args: o.Command, Dir: o.Dir, Env: o.Env,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}
	if o.OwnSession {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: o.TTY && o.Stdin != nil, Ctty: 0}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %q: %w", o.Command[0], err)
	}
	signal := func(sig syscall.Signal) {
		if o.OwnSession {
			_ = syscall.Kill(-cmd.Process.Pid, sig)
			return
		}
		_ = cmd.Process.Signal(sig)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	done := ctx.Done()
	var killTimer <-chan time.Time
	for {
		select {
		case err := <-waited:
			if o.OwnSession {
				signal(syscall.SIGKILL) // what it left running in its group ends with it
			}
			return exitCode(cmd.ProcessState, err)
		case sig := <-o.Signals:
			if s, ok := sig.(syscall.Signal); ok && s != syscall.SIGWINCH {
				signal(s)
			}
		case <-done:
			done = nil
			signal(syscall.SIGTERM)
			killTimer = time.After(grace)
		case <-killTimer:
			signal(syscall.SIGKILL)
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
