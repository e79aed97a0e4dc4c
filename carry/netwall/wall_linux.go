package netwall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door"
)

// cloneFlags are the namespaces a run gets.
const cloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWPID |
	unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// initCaps are what the init keeps (in its own user namespace only) when the
// caller is not root: enough to configure the namespace, then drop it all.
var initCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP}

const (
	// controlFD is the init's descriptor of the control socket (ExtraFiles[0]).
	controlFD = 3
	// startTimeout bounds how long the init may take to start the command.
	startTimeout = 30 * time.Second
	// closeGrace is how long Close lets a running command handle SIGTERM.
	closeGrace = 2 * time.Second
)

// Wall is a raised network wall: namespaces, rules and the door's listeners,
// and the command it runs (once started).
type Wall struct {
	logger *slog.Logger
	cmd    *exec.Cmd
	ctl    *channel
	lis    door.Listeners

	guards map[string]guardState // watched guarded paths (watchGuards)
	home   string                // the run's home, searched for repositories
	began  time.Time             // when the run began, less ctimeSlack
	// repos are the git directories under the home before the run, found
	// while the wall goes up; Start waits for them, so nothing the run does
	// can hide a repository from the search.
	repos chan []string

	exited  chan struct{} // closed when the init has been waited for
	state   *os.ProcessState
	waitErr error

	mu      sync.Mutex
	started bool
	closed  bool

	closeOnce sync.Once
}

// Raise creates the run's namespaces, brings lo up with default routes through
// it, installs the wall's nftables table, opens the door's listeners inside and
// passes them back. The command is not started: serve Listeners, then Start.
//
// A step the kernel refuses returns a *KernelError naming the fix.
func Raise(ctx context.Context, spec Spec) (*Wall, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("network wall: empty command")
	}
	if _, err := normalisePorts(spec.Ports); err != nil {
		return nil, err
	}
	logger := spec.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := initConfig{Command: spec.Command, Dir: spec.Dir, Env: spec.Env, Ports: spec.Ports, AllTCP: spec.AllTCP, TTY: spec.TTY}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.Env = dedupEnv(cfg.Env)
	if err := addTrust(&cfg, spec); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("network wall: working directory: %w", err)
		}
		cfg.Dir = wd
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("network wall: working directory %q is not a directory this user can reach (%v)", cfg.Dir, err)
	}

	places := workPlacesOf(cfg)
	guards := watchGuards(places)
	began := time.Now().Add(-ctimeSlack)
	repos := make(chan []string, 1)
	go func() { repos <- homeGitDirs(places.home) }()

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network wall: control socketpair: %w", err)
	}
	childEnd := os.NewFile(uintptr(fds[1]), "wall-control-child")
	ctl, err := newChannel(os.NewFile(uintptr(fds[0]), "wall-control"))
	if err != nil {
		childEnd.Close()
		return nil, fmt.Errorf("network wall: %w", err)
	}

	uid, gid := os.Getuid(), os.Getgid()
	cmd := &exec.Cmd{
		Path: Self,
		Args: []string{Self, InitArg},
		// The init is pid 1 of the run, whose /proc shows its environment:
		// it gets the run's, never more.
		Env:        cfg.Env,
		ExtraFiles: []*os.File{childEnd},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 cloneFlags,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
			GidMappingsEnableSetgroups: false,
			AmbientCaps:                initCaps,
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	// A nil *os.File in an io.Reader would not be nil: assign only real files.
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	err = cmd.Start()
	childEnd.Close()
	if err != nil {
		ctl.Close()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return nil, &KernelError{Step: StepUserns, Err: err, Remedy: remedy(StepUserns, errno, thisMachine())}
		}
		return nil, fmt.Errorf("network wall: start init %q: %w", Self, err)
	}
	w := &Wall{logger: logger, cmd: cmd, ctl: ctl, guards: guards, home: places.home, began: began, repos: repos, exited: make(chan struct{})}
	go w.reap()
	logger.Debug("wall init started", "pid", cmd.Process.Pid, "ports", spec.Ports)

	lis, err := w.handshake(ctx, cfg)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.lis = lis
	return w, nil
}

func kernelStep(step string) bool {
	switch step {
	case StepUserns, StepLoopback, StepRoute, StepListen, StepNftables, StepMount:
		return true
	}
	return false
}

func (w *Wall) reap() {
	err := w.cmd.Wait()
	w.state = w.cmd.ProcessState
	w.waitErr = err
	close(w.exited)
}

// exchange sends m and reads the reply, giving up when ctx is done.
func (w *Wall) exchange(ctx context.Context, m message) (message, []*os.File, error) {
	stop := context.AfterFunc(ctx, func() { w.ctl.conn.SetDeadline(time.Now()) })
	defer stop()
	if err := w.ctl.send(m); err != nil {
		return message{}, nil, w.initGone(ctx, err)
	}
	reply, files, err := w.ctl.recv()
	if err != nil {
		return message{}, nil, w.initGone(ctx, err)
	}
	if !stop() {
		for _, f := range files {
			f.Close()
		}
		return message{}, nil, ctx.Err()
	}
	if reply.Type == msgError && reply.Err != nil {
		for _, f := range files {
			f.Close()
		}
		if !kernelStep(reply.Err.Step) {
			return message{}, nil, fmt.Errorf("network wall: %s", reply.Err.Message)
		}
		return message{}, nil, reply.Err.kernelError(thisMachine())
	}
	return reply, files, nil
}

// initGone explains a failed exchange: cancelled, or the init died.
func (w *Wall) initGone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("network wall: %w", ctx.Err())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		select {
		case <-w.exited:
			return fmt.Errorf("network wall: init (%s) exited early: %v", Self, w.state)
		case <-time.After(time.Second):
		}
		return fmt.Errorf("network wall: init (%s) closed the control socket", Self)
	}
	return fmt.Errorf("network wall: %w", err)
}

func (w *Wall) handshake(ctx context.Context, cfg initConfig) (door.Listeners, error) {
	reply, files, err := w.exchange(ctx, message{Type: msgConfig, Config: &cfg})
	if err != nil {
		return door.Listeners{}, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if reply.Type != msgReady || (len(files) != 3 && len(files) != 4) {
		return door.Listeners{}, fmt.Errorf("network wall: init answered %q with %d descriptors, want %q with 3 or 4", reply.Type, len(files), msgReady)
	}
	return listenersFromFiles(files)
}

func closeListeners(l door.Listeners) {
	if l.Transparent != nil {
		l.Transparent.Close()
	}
	if l.DNSUDP != nil {
		l.DNSUDP.Close()
	}
	if l.DNSTCP != nil {
		l.DNSTCP.Close()
	}
	if l.Proxy != nil {
		l.Proxy.Close()
	}
	if l.WallLog != nil {
		l.WallLog.Close()
	}
}

// Listeners are the door's sockets inside the run's network namespace:
// Transparent (TCP, both families), DNSUDP and DNSTCP. Serve them from the host
// side; Close closes them.
func (w *Wall) Listeners() door.Listeners { return w.lis }

// Pid is the host pid of the wall's init (pid 1 of the run's pid namespace).
func (w *Wall) Pid() int { return w.cmd.Process.Pid }

// Start starts the command inside the wall.
func (w *Wall) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.started {
		return ErrAlreadyStarted
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	before := <-w.repos // bounded by repoSearchTime
	w.repos <- before
	reply, files, err := w.exchange(ctx, message{Type: msgStart})
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("network wall: start %q: %w", w.cmdName(), err)
	}
	if reply.Type != msgStarted {
		return fmt.Errorf("network wall: init answered %q to start, want %q", reply.Type, msgStarted)
	}
	w.started = true
	w.logger.Debug("wall command started", "init_pid", w.Pid(), "pid_in_run", reply.Pid)
	return nil
}

func (w *Wall) cmdName() string { return w.cmd.Args[0] }

// Signal forwards sig to the command's process group inside the wall.
func (w *Wall) Signal(sig syscall.Signal) error {
	w.mu.Lock()
	started, closed := w.started, w.closed
	w.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return ErrNotStarted
	}
	select {
	case <-w.exited:
		return os.ErrProcessDone
	default:
	}
	if err := w.ctl.send(message{Type: msgSignal, Signal: int(sig)}); err != nil {
		select {
		case <-w.exited:
			return os.ErrProcessDone
		default:
		}
		return fmt.Errorf("network wall: signal %v: %w", sig, err)
	}
	return nil
}

// Wait waits for the command to end and returns its exit status (128+n when
// signal n killed it). When Wait returns, every process of the run is gone.
func (w *Wall) Wait() (int, error) {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return -1, ErrNotStarted
	}
	<-w.exited
	return w.exitCode()
}

func (w *Wall) exitCode() (int, error) {
	st := w.state
	if st == nil {
		return -1, fmt.Errorf("network wall: wait for init: %w", w.waitErr)
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return st.ExitCode(), nil
	}
	if ws.Signaled() {
		// The init passes the command's signal on as 128+n; being killed
		// itself means the wall was torn down (Close) or the host killed it.
		return 128 + int(ws.Signal()), fmt.Errorf("network wall: init killed by %v", ws.Signal())
	}
	return ws.ExitStatus(), nil
}

// GuardChanges are the files programs outside the wall obey that the run
// made, replaced or changed although the wall could not hold them read-only:
// guarded paths that were missing or were links (a shell's startup files,
// git's and ssh's configuration, ...), and the configuration and hooks of
// other repositories under the home. It is nil until every process of the run
// is gone, since only then is the answer final.
func (w *Wall) GuardChanges() []GuardChange {
	select {
	case <-w.exited:
	default:
		return nil
	}
	out := guardChanges(w.guards)
	// The repositories found before the run, and those found now: the
	// second search may be led astray by what the run made, the first not.
	before := <-w.repos
	w.repos <- before
	dirs := before
	for _, d := range homeGitDirs(w.home) {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, c := range changedGitFiles(dirs, w.began) {
		if !slices.ContainsFunc(out, func(o GuardChange) bool { return o.Path == c.Path }) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b GuardChange) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Close ends the run if it is still going (SIGTERM to the command, then SIGKILL
// to the whole pid namespace after a short grace), waits for it and closes
// every descriptor. Nothing of the wall remains afterwards. It is idempotent.
func (w *Wall) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		started := w.started
		w.closed = true
		w.mu.Unlock()
		select {
		case <-w.exited:
		default:
			if started {
				_ = w.ctl.send(message{Type: msgSignal, Signal: int(syscall.SIGTERM)})
				select {
				case <-w.exited:
				case <-time.After(closeGrace):
				}
			}
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
		w.ctl.Close()
		closeListeners(w.lis)
	})
	return nil
}

// dedupEnv keeps the last value of each variable, as os/exec does.
func dedupEnv(env []string) []string {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}
