package container

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/procstat"
)

// Labels put on every container postern starts.
const (
	LabelRun      = "postern.run"      // the run's id
	LabelPid      = "postern.pid"      // the controlling postern's pid
	LabelPidStart = "postern.pidstart" // its start time, so a reused pid is not mistaken for it
)

const (
	// helloTimeout bounds how long the container may take to start and say hello.
	helloTimeout = 90 * time.Second
	// startTimeout bounds how long the harness may take to start the command.
	startTimeout = 30 * time.Second
	// closeGrace is how long Close lets a running command handle SIGTERM.
	closeGrace = 2 * time.Second
	// exitTimeout bounds how long the engine may take to remove an ended container.
	exitTimeout = 30 * time.Second
	// maxStartAttempts bounds restarts after the runtime refused a resource limit.
	maxStartAttempts = 8
)

// Wall is a started container whose network namespace is the wall, and the
// command it runs (once started).
type Wall struct {
	eng    *Engine
	name   string
	dir    string
	logger *slog.Logger
	lis    door.Listeners
	pid    int // host pid of the harness

	client *client

	ctl     *control
	ctlDone chan struct{} // closed when the harness's end is closed
	replies chan message  // started or error, after start

	life     carry.Life
	mu       sync.Mutex // guards exitCode and exited
	exitCode int
	exited   bool // the harness reported the command's exit
	// notStarted is the harness's word that the command could not be
	// started at all (see NotStarted).
	notStarted *message

	closeOnce sync.Once
}

// Raise starts a container from spec.Image with no network, postern's harness
// as its entrypoint, waits for the harness, and (unless NoNetwork or Open) makes
// the container's network namespace the wall with the door's listeners inside. The
// command is not started: serve Listeners, then Start.
//
// A step the kernel refuses returns a *netwall.KernelError naming the fix.
func Raise(ctx context.Context, spec Spec) (*Wall, error) {
	if spec.Engine == nil {
		return nil, errors.New("container: no engine")
	}
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("container: empty command")
	}
	if spec.Image == "" {
		return nil, errors.New("container: no image")
	}
	if spec.NoNetwork && spec.Open {
		return nil, errors.New("container: no network and an open network at once")
	}
	if !spec.NoNetwork && !spec.Open && os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the wall is raised in the container's network namespace from the host; run postern as root with a rootful engine, or use --container-network none for a container with no network", ErrNeedsRoot)
	}
	logger := spec.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	self, err := HarnessBinary(spec.Self)
	if err != nil {
		return nil, err
	}
	// Named for this process, so Sweep can tell when its owner is gone.
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d.%d-", dirPrefix, os.Getpid(), procstat.StartTime(os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	w := &Wall{eng: spec.Engine, dir: dir, logger: logger, name: containerName(spec.Run),
		ctlDone: make(chan struct{}), replies: make(chan message, 1)}
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()
	// The container's user may be anyone: it must reach the socket. Who
	// connects is checked against the engine (see accept).
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	resolv := filepath.Join(dir, "resolv.conf")
	// Every DNS packet inside the wall goes to the door whatever it names.
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}

	var conn *net.UnixConn
	attemptsAdapted := false
	for attempt := 1; ; attempt++ {
		conn, err = w.startContainer(ctx, spec, self, resolv)
		if err == nil {
			break
		}
		var se *startError
		if !errors.As(err, &se) || attempt >= maxStartAttempts {
			return nil, err
		}
		r, refused := refusedRlimit(se.stderr)
		if !refused {
			if spec.Engine.remembered {
				// What was remembered may no longer hold (a runtime removed):
				// the next run detects afresh.
				spec.Engine.forget()
			}
			return nil, err
		}
		flag, lower := spec.Engine.adaptRlimit(r)
		if !lower {
			return nil, err
		}
		attemptsAdapted = true
		logger.Info("container runtime refused a resource limit; retrying lower", "engine", spec.Engine.Name, "ulimit", flag)
	}
	// The harness is connected: the socket and resolv.conf are bound into
	// the container, and the host needs neither by name any more. Removed
	// now, nothing of the run's is left on the host if postern is killed.
	_ = os.RemoveAll(w.dir)
	w.ctl = newControl(conn)
	go w.read()
	if attemptsAdapted || !spec.Engine.remembered {
		spec.Engine.remember()
	}

	if !spec.NoNetwork && !spec.Open {
		lis, err := configureNetns(w.pid, spec.Ports, spec.AllTCP)
		if err != nil {
			return nil, err
		}
		w.lis = lis
	}
	ok = true
	logger.Debug("container wall raised", "container", w.name, "pid", w.pid, "engine", spec.Engine.Name)
	return w, nil
}

// startError is a container that ended before its harness said hello.
type startError struct {
	engine string
	image  string
	err    error
	stderr string
}

func (e *startError) Error() string {
	return fmt.Sprintf("container: start image %q with %s: %v: %s", e.image, e.engine, e.err, firstLines(strings.TrimSpace(e.stderr), 4))
}

func (e *startError) Unwrap() error { return e.err }

// startContainer starts the engine's client for one attempt and waits for the
// harness to connect. A container that ends first is a *startError.
func (w *Wall) startContainer(ctx context.Context, spec Spec, self, resolv string) (*net.UnixConn, error) {
	sock := filepath.Join(w.dir, controlName)
	_ = os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("container: control socket: %w", err)
	}
	defer l.Close() // one harness connects; nobody else may afterwards
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o666); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}

	args := []string{"run", "--rm", "--name", w.name,
		"--label", LabelRun + "=" + spec.Run,
		"--label", LabelPid + "=" + strconv.Itoa(os.Getpid()),
		"--label", LabelPidStart + "=" + strconv.FormatUint(procstat.StartTime(os.Getpid()), 10),
		"--cap-drop", "all",
		"--security-opt", "no-new-privileges",
		"--sig-proxy=false",
		"--volume", self + ":" + HarnessPath + ":ro",
		// Read-only: connecting to the socket needs no write to the
		// directory, and nothing the run makes there can reach the host
		// (a setuid shell in the host's /tmp, for one).
		"--volume", w.dir + ":" + controlDir + ":ro",
		"--entrypoint", HarnessPath,
	}
	if !spec.Open {
		// Walled, or no network: the engine gives the container none, and
		// every lookup goes to the door's resolver inside the wall. Open, it
		// keeps the engine's network and resolver.
		args = append(args, "--network", "none", "--volume", resolv+":/etc/resolv.conf:ro")
	}
	if spec.Stdin != nil {
		args = append(args, "--interactive")
	}
	if spec.TTY {
		args = append(args, "--tty")
	}
	// Each variable by name only: its value reaches the engine's client
	// through its environment, never its command line, which every user of
	// the machine can read.
	var clientEnv []string
	for _, kv := range spec.Env {
		name, _, _ := strings.Cut(kv, "=")
		args = append(args, "--env", name)
		clientEnv = append(clientEnv, kv)
	}
	if spec.PidsLimit > 0 {
		args = append(args, "--pids-limit", strconv.Itoa(spec.PidsLimit))
	}
	args = append(args, spec.Engine.ulimitFlags()...)
	args = append(args, spec.Image, InitArg, "--")
	args = append(args, spec.Command...)

	// The client outlives ctx only as long as Close lets it.
	cmd := spec.Engine.command(context.WithoutCancel(ctx), args...)
	if len(clientEnv) > 0 {
		cmd.Env = append(os.Environ(), clientEnv...)
	}
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	var errOut io.Writer = io.Discard
	if spec.Stderr != nil {
		errOut = spec.Stderr
	}
	if !spec.TTY {
		// Terminal-generated signals reach the run through postern, not the
		// engine's client (with a terminal, the client needs the foreground).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	c, err := startClient(cmd, errOut)
	if err != nil {
		return nil, fmt.Errorf("container: start %s: %w", spec.Engine.Path, err)
	}
	w.client = c

	attemptDone := make(chan struct{})
	defer close(attemptDone)
	accepted := make(chan *net.UnixConn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		conn, err := l.AcceptUnix()
		if err != nil {
			acceptErr <- err
			return
		}
		select {
		case accepted <- conn:
		case <-attemptDone:
			conn.Close()
		}
	}()
	timer := time.NewTimer(helloTimeout)
	defer timer.Stop()
	fail := func(err error) (*net.UnixConn, error) {
		l.Close()
		w.killContainer()
		<-c.done
		return nil, err
	}
	select {
	case conn := <-accepted:
		if err := w.accept(ctx, conn); err != nil {
			conn.Close()
			return fail(err)
		}
		c.stderr.open()
		return conn, nil
	case <-c.done:
		return nil, &startError{engine: spec.Engine.Name, image: spec.Image, err: c.err, stderr: c.stderr.held()}
	case err := <-acceptErr:
		return fail(fmt.Errorf("container: accept the harness: %w", err))
	case <-timer.C:
		return fail(fmt.Errorf("container: the harness in %s did not connect within %s: %s", w.name, helloTimeout, firstLines(c.stderr.held(), 4)))
	case <-ctx.Done():
		return fail(fmt.Errorf("container: %w", ctx.Err()))
	}
}

// client is the engine's client process attached to the container.
type client struct {
	cmd    *exec.Cmd
	stderr *gate
	done   chan struct{} // closed when it has been waited for
	err    error         // its Wait error, once done
}

func startClient(cmd *exec.Cmd, stderr io.Writer) (*client, error) {
	// What the engine prints before the container runs is its own complaint:
	// held back, so a refused resource limit can be retried quietly.
	c := &client{cmd: cmd, stderr: &gate{dst: stderr}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// accept checks that the peer is the container's init, and reads its hello.
func (w *Wall) accept(ctx context.Context, c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("container: control socket: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return fmt.Errorf("container: control socket: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("container: peer of the control socket: %w", cerr)
	}
	pid, err := w.inspectPid(ctx)
	if err != nil {
		return err
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("container: process %d connected to the control socket, but %s's init is %d: refusing it", cred.Pid, w.name, pid)
	}
	w.pid = pid
	_ = c.SetReadDeadline(time.Now().Add(startTimeout))
	ctl := newControl(c)
	m, err := ctl.recv()
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("container: hello from the harness: %w", err)
	}
	if m.Type != msgHello || m.Version != protocolVersion {
		return fmt.Errorf("container: the harness said %q version %d, want %q version %d (is %s the same postern?)", m.Type, m.Version, msgHello, protocolVersion, HarnessPath)
	}
	return nil
}

// inspectPid asks the engine for the host pid of the container's init. The
// engine may record it a moment after the init runs.
func (w *Wall) inspectPid(ctx context.Context) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := w.eng.output(ctx, "inspect", "--format", "{{.State.Pid}}", w.name)
		if err != nil {
			return 0, fmt.Errorf("container: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err == nil && pid > 0 {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("container: %s inspect %s: no pid (%q)", w.eng.Name, w.name, strings.TrimSpace(string(out)))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// configureNetns enters pid's network namespace on a thread of its own and makes
// it the wall. The thread is never unlocked, so it ends with the goroutine
// instead of carrying the namespace back into the runtime's pool.
func configureNetns(pid int, ports []uint16, allTCP bool) (door.Listeners, error) {
	type result struct {
		lis door.Listeners
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		host, err := netns.Get()
		if err != nil {
			res <- result{err: fmt.Errorf("container: this thread's network namespace: %w", err)}
			return
		}
		defer host.Close()
		target, err := netns.GetFromPid(pid)
		if err != nil {
			res <- result{err: fmt.Errorf("container: network namespace of pid %d: %w", pid, err)}
			return
		}
		defer target.Close()
		if target.Equal(host) {
			res <- result{err: fmt.Errorf("container: pid %d shares the host's network namespace; the engine did not give it --network none", pid)}
			return
		}
		if err := netns.Set(target); err != nil {
			res <- result{err: &netwall.KernelError{Step: netwall.StepUserns, Err: err,
				Remedy: "entering a container's network namespace needs CAP_SYS_ADMIN: run postern as root with a rootful engine"}}
			return
		}
		lis, err := netwall.Configure(ports, allTCP)
		res <- result{lis, err}
	}()
	r := <-res
	return r.lis, r.err
}

// read takes the harness's messages until its end closes.
func (w *Wall) read() {
	defer close(w.ctlDone)
	for {
		m, err := w.ctl.recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				w.logger.Warn("container control", "container", w.name, "err", err)
			}
			return
		}
		switch m.Type {
		case msgStarted, msgError:
			select {
			case w.replies <- m:
			default:
			}
			if m.Type == msgError {
				w.mu.Lock()
				w.exitCode, w.exited = m.Code, true
				w.mu.Unlock()
			}
		case msgExited:
			w.mu.Lock()
			w.exitCode, w.exited = m.Code, true
			w.mu.Unlock()
		}
	}
}

// Listeners are the door's sockets inside the container's network namespace.
func (w *Wall) Listeners() door.Listeners { return w.lis }

// Name is the container's name.
func (w *Wall) Name() string { return w.name }

// Pid is the host pid of the container's init (the harness).
func (w *Wall) Pid() int { return w.pid }

// Start tells the harness to start the command, and waits for its answer
// until ctx is done or startTimeout has passed. Signal and Close do not wait
// for it.
func (w *Wall) Start(ctx context.Context) error {
	if err := w.life.BeginStart(); err != nil {
		return err
	}
	if err := w.ctl.send(message{Type: msgStart}); err != nil {
		_ = w.life.EndStart(false)
		return fmt.Errorf("container: start: %w", err)
	}
	// Sent: the harness may start the command whatever comes next, so the
	// run counts as started (Wait and Close reap it).
	if err := w.life.EndStart(true); err != nil {
		return err
	}
	answered := func(m message) error {
		if m.Type == msgError {
			// As a shell would: the harness said why on the run's stderr, and
			// Wait reports its status (127: not found, 126: cannot run).
			w.logger.Debug("container command did not start", "container", w.name, "code", m.Code, "err", m.Error)
			w.notStarted = &m
			return nil
		}
		w.logger.Debug("container command started", "container", w.name, "pid_in_container", m.Pid)
		return nil
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case m := <-w.replies:
		return answered(m)
	case <-w.ctlDone:
		// The harness may answer and end at once (a command not found):
		// its answer counts.
		select {
		case m := <-w.replies:
			return answered(m)
		default:
		}
		return fmt.Errorf("container: the harness in %s ended before starting the command", w.name)
	case <-timer.C:
		return fmt.Errorf("container: the harness in %s did not start the command within %s", w.name, startTimeout)
	case <-ctx.Done():
		return fmt.Errorf("container: start the command in %s: %w", w.name, ctx.Err())
	}
}

// NotStarted reports whether the harness could not start the command at
// all, with the status a shell gives that (127 not found, 126 cannot be
// executed) and the harness's reason; Wait then returns that status.
func (w *Wall) NotStarted() (code int, why string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.notStarted == nil {
		return 0, "", false
	}
	return w.notStarted.Code, w.notStarted.Error, true
}

// Signal forwards sig to the command's process group inside the container.
func (w *Wall) Signal(sig syscall.Signal) error {
	if err := w.life.CanSignal(); err != nil {
		return err
	}
	select {
	case <-w.ctlDone:
		return os.ErrProcessDone
	default:
	}
	if err := w.ctl.send(message{Type: msgSignal, Signal: int(sig)}); err != nil {
		return fmt.Errorf("container: signal %v: %w", sig, err)
	}
	return nil
}

// Wait waits for the command to end and the engine to remove the container, and
// returns the command's exit status (128+n when signal n killed it; 127 when it
// was not found, 126 when it could not be run).
func (w *Wall) Wait() (int, error) {
	if !w.life.Started() {
		return -1, ErrNotStarted
	}
	<-w.ctlDone
	var clientErr error
	select {
	case <-w.client.done:
		clientErr = w.client.err
	case <-time.After(exitTimeout):
		w.killContainer()
		<-w.client.done
		clientErr = fmt.Errorf("%s did not end within %s of the container's command", w.eng.Name, exitTimeout)
	}
	w.mu.Lock()
	code, exited := w.exitCode, w.exited
	w.mu.Unlock()
	if !exited {
		return exitKilled, fmt.Errorf("container: %s ended without reporting the command's status (%s: %v): %s", w.name, w.eng.Name, clientErr, firstLines(w.client.stderr.held(), 4))
	}
	return code, nil
}

// Close ends the run if it is still going (SIGTERM to the command, then the
// harness is cut off, which kills everything in the container), waits for the
// engine to remove the container and removes what the host held for it. It is
// idempotent.
func (w *Wall) Close() error {
	w.closeOnce.Do(func() {
		started := w.life.Close()
		if w.ctl != nil {
			if started {
				select {
				case <-w.ctlDone:
				default:
					_ = w.ctl.send(message{Type: msgSignal, Signal: int(syscall.SIGTERM)})
					select {
					case <-w.ctlDone:
					case <-time.After(closeGrace):
					}
				}
			}
			w.ctl.Close()
		}
		if w.client != nil {
			select {
			case <-w.client.done:
			case <-time.After(exitTimeout):
				w.killContainer()
				<-w.client.done
			}
		}
		// The client normally removes the container (--rm); make sure.
		if w.name != "" && w.client != nil {
			ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
			if w.exists(ctx) {
				_, _ = w.eng.output(ctx, w.eng.removeArgs(w.name)...)
			}
			cancel()
		}
		w.lis.Close()
		_ = os.RemoveAll(w.dir)
	})
	return nil
}

// killContainer kills the container and its client.
func (w *Wall) killContainer() {
	ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	_, _ = w.eng.output(ctx, w.eng.removeArgs(w.name)...)
	if w.client != nil {
		_ = w.client.cmd.Process.Kill()
	}
}

func (w *Wall) exists(ctx context.Context) bool { return w.eng.containerExists(ctx, w.name) }

func (e *Engine) containerExists(ctx context.Context, name string) bool {
	_, err := e.output(ctx, "container", "inspect", "--format", "{{.Id}}", name)
	return err == nil
}

func containerName(run string) string {
	if run == "" {
		run = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return "postern-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, run)
}

// HarnessBinary resolves the binary to mount as the harness (self, or the
// running executable when self is "") and checks that it can run in any image:
// statically linked, no interpreter. Otherwise the error is ErrNotStatic.
func HarnessBinary(self string) (string, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("container: find postern's own binary: %w", err)
		}
		self = exe
	}
	real, err := filepath.EvalSymlinks(self)
	if err != nil {
		return "", fmt.Errorf("container: harness binary %q: %w", self, err)
	}
	f, err := elf.Open(real)
	if err != nil {
		return "", fmt.Errorf("container: harness binary %q: %w", real, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w: %s needs a dynamic loader and would not run inside an arbitrary image; build it with CGO_ENABLED=0 (make build)", ErrNotStatic, real)
		}
	}
	return real, nil
}

// gate holds what is written until open, then passes everything through.
type gate struct {
	mu     sync.Mutex
	dst    io.Writer
	buf    bytes.Buffer
	opened bool
}

const gateMax = 64 << 10

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened {
		return g.dst.Write(p)
	}
	if room := gateMax - g.buf.Len(); room > 0 {
		g.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// open flushes what was held and lets the rest through.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		_, _ = g.dst.Write(g.buf.Bytes())
		g.opened = true
	}
}

func (g *gate) held() string {
	if g == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}
