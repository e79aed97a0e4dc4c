//go:build !postern_wallinit

package netwall

import (
	"context"
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

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door"
)

// cloneFlags are the namespaces a run gets.
const cloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWPID |
	unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// initCaps are what the init keeps: in its own user namespace when the
// caller is not root, enough to configure the namespace, then drop it all;
// for root, in the host's (see forker), and then CAP_DAC_OVERRIDE reaches
// every file the init's view holds, as it always did root's own files.
// Overlayfs works in its upper layer as its mounter, in a work directory of
// mode 0: that needs CAP_DAC_OVERRIDE.
var initCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP, unix.CAP_DAC_OVERRIDE}

const (
	// startTimeout bounds how long the init may take to start the command.
	startTimeout = 30 * time.Second
	// closeGrace is how long Close lets a running command handle SIGTERM.
	closeGrace = 2 * time.Second
)

// Wall is a raised network wall: namespaces, rules and the door's listeners,
// and the command it runs (once started).
type Wall struct {
	logger *slog.Logger
	init   *initProc
	ctl    *channel
	lis    door.Listeners
	// refused carries Landlock's refusals to the door; allowed are the
	// ports Landlock lets the command connect to.
	refused chan netip.AddrPort
	allowed map[uint16]bool
	// watchStop ends the watch of the command's connects; watchDone is
	// closed when it has ended.
	watchStop *os.File
	watchDone chan struct{}

	// pidsDone is closed once the run's pids limit is in place (see
	// holdPids); pids and pidsDesc are set before.
	pidsDone chan struct{}
	pids     *pidsCgroup // the run's cgroup, if it has one
	pidsDesc string      // what holds the run's pids (PidsLimit)
	// ending is what the init said became of the run's writes; endRead is
	// closed once the control socket has nothing more to say.
	ending  *Ending
	endRead chan struct{}
	// ended is closed when the init has said the command's status, every
	// other process of the run reaped (status); the init itself may still
	// be exiting.
	ended  chan struct{}
	status int

	exited  chan struct{} // closed when the init has been waited for
	state   syscall.WaitStatus
	waitErr error

	// forker is the thread that cloned the init where it has no user
	// namespace of its own (forker_linux.go); it lasts until the init has
	// been waited for.
	forker *forker

	life carry.Life
	mu   sync.Mutex // guards ending

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
	cfg := initConfig{Command: spec.Command, Dir: spec.Dir, Env: spec.Env, netPlan: netPlan{Ports: spec.Ports, AllTCP: spec.AllTCP, NoNetwork: spec.NoNetwork}, TTY: spec.TTY}
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

	if !spec.NoNetwork && os.Geteuid() == 0 {
		// Once a boot: the wall's commit then only counts the netfilter
		// hooks' keys rather than rewriting the kernel's code (see
		// HooksHolder).
		if err := HoldHooks(); err != nil {
			logger.Debug("netfilter hooks not held", "err", err)
		}
	}
	limit := spec.PidsLimit
	if limit <= 0 {
		limit = DefaultPidsLimit
	}
	initPath := Self
	if spec.InitDir != "" {
		if p, err := keptInit(spec.InitDir); err != nil {
			logger.Warn("wall init: re-executing this binary, its own init could not be kept", "dir", spec.InitDir, "err", err)
		} else if p != "" {
			initPath = p
		}
	}
	pid1 := pid1Path
	if pid1 == "" && initPath != Self {
		if p, err := keptPid1(spec.InitDir, initPath); err != nil {
			logger.Warn("wall pid 1: starting the Go init, the small pid 1 could not be kept", "dir", spec.InitDir, "err", err)
		} else {
			pid1 = p
		}
	}
	// What holds the run counts the init's tasks too: the Go init's spare
	// threads (see reserveThreads), or the small pid 1 alone. They are the
	// init's, not the run's share.
	fast := fastLane(spec, &cfg, pid1)
	held := limit + spareThreads
	if fast {
		held = limit + 1
	}
	if os.Geteuid() != 0 {
		// Held by RLIMIT_NPROC too, whatever becomes of the cgroup.
		cfg.NProc = uint64(held)
	}

	// Where the run's cgroup is a cgroup v2 one, the init starts in it
	// (CLONE_INTO_CGROUP); a cgroup v1 one it is moved into beside the
	// handshake, moving taking milliseconds there (v1 waits for RCU), unless
	// the run's own pid_max holds it.
	var (
		cg   *pidsCgroup
		why  string
		proc *initProc
		ctl  *channel
		fk   *forker
	)
	begin := func(planned func() error) error {
		cg, why = newPidsCgroup(held, false)
		cgroupFD := -1
		if cg != nil && cg.version == 2 {
			var err error
			if cgroupFD, err = unix.Open(cg.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				cg.remove()
				cg, why = nil, err.Error()
			}
		}
		start := func(cgroupFD int) (*initProc, *channel, *forker, error) {
			if fast {
				proc, ctl, fk, err := startFast(pid1, spec, &cfg, cgroupFD, planned)
				if !errors.Is(err, errNoFast) {
					if err == nil {
						initPath = pid1
					}
					return proc, ctl, fk, err
				}
				logger.Debug("wall set up by its Go init", "err", err)
				// The Go init's threads, not pid 1's one task, beside the run.
				fast, held = false, limit+spareThreads
				if cg != nil {
					if err := cg.setLimit(held); err != nil {
						logger.Warn("wall pids limit: the Go init's threads count against the run's", "err", err)
					}
				}
			}
			if err := planned(); err != nil {
				return nil, nil, nil, err
			}
			return startInit(initPath, spec, &cfg, cgroupFD)
		}
		var err error
		proc, ctl, fk, err = start(cgroupFD)
		if perr := planned(); perr != nil && errors.Is(err, perr) {
			// Refused before anything is spawned.
			if cgroupFD >= 0 {
				unix.Close(cgroupFD)
			}
			if cg != nil {
				cg.remove()
			}
			return err
		}
		if err != nil && proc != nil {
			// Started, and gone wrong after: nothing to start again.
			proc.kill()
			go proc.wait()
			if fk != nil {
				fk.release()
			}
		} else if err != nil && cgroupFD >= 0 {
			// A kernel before 5.7, or a cgroup this user may not start in.
			unix.Close(cgroupFD)
			cgroupFD = -1
			cg.remove()
			cg, why = nil, fmt.Sprintf("start in cgroup %s: %v", cg.dir, err)
			proc, ctl, fk, err = start(-1)
		}
		if cgroupFD >= 0 {
			unix.Close(cgroupFD)
		}
		if err != nil {
			if cg != nil {
				cg.remove()
			}
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return &KernelError{Step: StepUserns, Err: err, Remedy: remedy(StepUserns, errno, thisMachine())}
			}
			return fmt.Errorf("network wall: start init %q: %w", initPath, err)
		}
		return nil
	}
	// Where postern sets the wall up itself, its namespaces and the network
	// go up on its threads while the run's layout is planned on another:
	// neither needs the other (the layout reaches the setup with the
	// configuration). Nothing is spawned before the layout is planned: a
	// place refused is refused before any process starts (planned says
	// how the planning went, once it has). The Go init, on one scheduler
	// thread, gained nothing so (see docs/BENCHMARKS.md), and starts once
	// the layout is planned.
	var lay layout
	var err error
	if fast {
		done := make(chan struct{})
		dir, env, files := cfg.Dir, cfg.Env, spec.Files
		go func() {
			defer close(done)
			lay, err = planLayout(dir, env, files)
		}()
		planned := func() error { <-done; return err }
		if berr := begin(planned); berr != nil {
			return nil, berr
		}
	} else {
		if lay, err = planLayout(cfg.Dir, cfg.Env, spec.Files); err != nil {
			return nil, err
		}
		if err := begin(func() error { return nil }); err != nil {
			return nil, err
		}
	}
	cfg.Layout = lay
	w := &Wall{logger: logger, init: proc, ctl: ctl, forker: fk, exited: make(chan struct{}), endRead: make(chan struct{}), ended: make(chan struct{}), pidsDone: make(chan struct{})}
	var pidMax chan string
	if why == pidMaxInstead {
		cfg.PidMax = pidMaxFor(held)
		pidMax = make(chan string, 1)
	}
	go w.holdPids(cg, why, limit, held, cfg.NProc > 0, pidMax)
	go w.reap()
	logger.Debug("wall init started", "pid", proc.pid, "ports", spec.Ports)

	lis, pidMaxErr, err := w.handshake(ctx, cfg)
	if pidMax != nil {
		if err == nil {
			pidMax <- pidMaxErr
		}
		close(pidMax) // before Close, which waits for holdPids
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	if ports := connectPorts(cfg.Env); ports != nil && !cfg.NoNetwork {
		// Landlock's refusals, which the wall never sees, reach the door
		// once the command starts (see connectwatch_linux.go).
		ch := make(chan netip.AddrPort, 64)
		w.refused, w.allowed = ch, ports
		lis.Refused = ch
	}
	w.lis = lis
	return w, nil
}

func kernelStep(step string) bool {
	switch step {
	case StepUserns, StepLoopback, StepRoute, StepListen, StepNftables, StepMount, StepOverlay:
		return true
	}
	return false
}

func (w *Wall) reap() {
	w.state, w.waitErr = w.init.wait()
	if w.forker != nil {
		w.forker.release()
	}
	<-w.pidsDone
	if w.pids != nil {
		w.pids.remove()
	}
	close(w.exited)
}

// holdPids puts the init, and so all of the run, in cg, a cgroup of its own
// limited to held tasks (limit, the run's, and the init's spare threads),
// unless it started there (cgroup v2), the run's pid_max holds it, or there
// is none (why). The init waits for its configuration before it starts anything, and
// the command waits for Start, which waits for this. rlimit says RLIMIT_NPROC
// holds the run too.
//
// pidMax, where the run's pid namespace's pid_max is to hold it, gives what
// the init answered: "" it is set, else why not, and the run gets a cgroup
// v1 instead; closed with nothing, the wall went no further.
func (w *Wall) holdPids(cg *pidsCgroup, why string, limit, held int, rlimit bool, pidMax <-chan string) {
	defer close(w.pidsDone)
	if pidMax != nil {
		perr, ok := <-pidMax
		if !ok {
			return
		}
		if perr == "" {
			w.pidsDesc = fmt.Sprintf("%d tasks (the run's pid namespace's pid_max, %d; up to %d more before its pids first wrap)", limit, held+pidsReserved, pidsReserved-1)
			w.logger.Debug("wall pids limit", "pid", w.init.pid, "held_by", w.pidsDesc)
			return
		}
		var whyNot string
		cg, whyNot = newPidsCgroup(held, true)
		why = "set pid_max in the run's pid namespace: " + perr
		if whyNot != "" {
			why += "; " + whyNot
		}
	}
	if cg != nil && cg.version == 1 {
		if err := cg.add(w.init.pid); err != nil {
			cg.remove()
			cg, why = nil, err.Error()
		}
	}
	w.pids = cg
	switch {
	case cg != nil:
		w.pidsDesc = fmt.Sprintf("%d tasks (%s)", limit, cg)
	case rlimit:
		w.pidsDesc = fmt.Sprintf("%d processes of this user in the run's user namespace (RLIMIT_NPROC; no cgroup of its own: %s)", limit, why)
	default:
		w.pidsDesc = fmt.Sprintf("none: no cgroup of its own (%s), and RLIMIT_NPROC does not hold root", why)
	}
	w.logger.Debug("wall pids limit", "pid", w.init.pid, "held_by", w.pidsDesc)
}

// readEnding takes the init's last word, what became of the run's writes,
// until the control socket closes with the init.
func (w *Wall) readEnding() {
	defer close(w.endRead)
	for {
		m, files, err := w.ctl.recv()
		for _, f := range files {
			f.Close()
		}
		if err != nil {
			return
		}
		if m.Type == msgEnded && m.Ending != nil {
			e := *m.Ending
			w.mu.Lock()
			w.ending = &e
			w.mu.Unlock()
			if m.Status != nil && !isClosed(w.ended) {
				w.status = *m.Status
				close(w.ended)
			}
		}
	}
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
			return fmt.Errorf("network wall: init (%s) exited early: %s", w.init.path, w.exitText())
		case <-time.After(time.Second):
		}
		return fmt.Errorf("network wall: init (%s) closed the control socket", w.init.path)
	}
	return fmt.Errorf("network wall: %w", err)
}

// handshake sends the init its configuration and takes the door's listeners,
// and what the init said of the run's pid_max (cfg.PidMax): "" set.
func (w *Wall) handshake(ctx context.Context, cfg initConfig) (door.Listeners, string, error) {
	reply, files, err := w.exchange(ctx, message{Type: msgConfig, Config: &cfg})
	if err != nil {
		return door.Listeners{}, "", err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if cfg.NoNetwork && reply.Type == msgReady && len(files) == 0 {
		return door.Listeners{}, reply.PidMaxErr, nil // nothing to judge: no door
	}
	if reply.Type != msgReady || (len(files) != 3 && len(files) != 4) {
		return door.Listeners{}, "", fmt.Errorf("network wall: init answered %q with %d descriptors, want %q with 3 or 4", reply.Type, len(files), msgReady)
	}
	lis, err := listenersFromFiles(files)
	return lis, reply.PidMaxErr, err
}

// Listeners are the door's sockets inside the run's network namespace:
// Transparent (TCP, both families), DNSUDP and DNSTCP. Serve them from the host
// side; Close closes them.
func (w *Wall) Listeners() door.Listeners { return w.lis }

// Pid is the host pid of the wall's init (pid 1 of the run's pid namespace).
func (w *Wall) Pid() int { return w.init.pid }

// Start starts the command inside the wall, giving up when ctx is done or
// after startTimeout. Signal and Close do not wait for it.
func (w *Wall) Start(ctx context.Context) error {
	if err := w.life.BeginStart(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	select {
	case <-w.pidsDone:
	case <-ctx.Done():
		_ = w.life.EndStart(false)
		return fmt.Errorf("network wall: start %q: %w", w.cmdName(), ctx.Err())
	}
	reply, files, err := w.exchange(ctx, message{Type: msgStart})
	if err == nil && reply.Type == msgStarted && len(files) == 1 && w.refused != nil {
		// The command's connect notifications: watched until the run ends.
		if r, wr, perr := os.Pipe(); perr == nil {
			w.watchStop, w.watchDone = wr, make(chan struct{})
			notify := files[0]
			go func() {
				defer close(w.watchDone)
				watchConnects(notify, r, w.allowed, w.refused)
			}()
			files = nil
		}
	}
	for _, f := range files {
		f.Close()
	}
	if err == nil && reply.Type != msgStarted {
		err = fmt.Errorf("init answered %q to start, want %q", reply.Type, msgStarted)
	}
	if cerr := w.life.EndStart(err == nil); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("network wall: start %q: %w", w.cmdName(), err)
	}

	go w.readEnding()
	w.logger.Debug("wall command started", "init_pid", w.Pid(), "pid_in_run", reply.Pid)
	return nil
}

// PidsLimit says what holds the run's processes and threads: its cgroup, its
// pid namespace's pid_max, RLIMIT_NPROC, or, for root with none of them,
// nothing.
func (w *Wall) PidsLimit() string {
	<-w.pidsDone
	return w.pidsDesc
}

func (w *Wall) cmdName() string { return w.init.argv[0] }

// exitText says how the init ended, once it has been waited for.
func (w *Wall) exitText() string {
	if w.waitErr != nil {
		return w.waitErr.Error()
	}
	return statusText(w.state)
}

// Signal forwards sig to the command's process group inside the wall.
func (w *Wall) Signal(sig syscall.Signal) error {
	if err := w.life.CanSignal(); err != nil {
		return err
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
// signal n killed it). When Wait returns, every process of the run is gone:
// the init has reaped them all and may still be exiting, its namespaces torn
// down; Close waits for that.
func (w *Wall) Wait() (int, error) {
	if !w.life.Started() {
		return -1, ErrNotStarted
	}
	select {
	case <-w.ended:
		return w.status, nil
	case <-w.exited:
	}
	return w.exitCode()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (w *Wall) exitCode() (int, error) {
	if w.waitErr != nil {
		return -1, fmt.Errorf("network wall: wait for init: %w", w.waitErr)
	}
	ws := w.state
	if ws.Signaled() {
		// The init passes the command's signal on as 128+n; being killed
		// itself means the wall was torn down (Close) or the host killed it.
		return 128 + int(ws.Signal()), fmt.Errorf("network wall: init killed by %v", ws.Signal())
	}
	return ws.ExitStatus(), nil
}

// Ending says what became of the run's writes: what was discarded, and where
// the home's were kept if asked. It waits for every process of the run to be
// gone, and is the zero Ending for a run that never started or whose init
// was killed before it could tell.
func (w *Wall) Ending() Ending {
	if !w.life.Started() {
		return Ending{}
	}
	select {
	case <-w.ended: // told with the status
	case <-w.exited:
		select {
		case <-w.endRead:
		case <-time.After(closeGrace):
			// Nothing holds the socket once the init is gone; this is a bound.
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ending == nil {
		return Ending{}
	}
	return *w.ending
}

// Close ends the run if it is still going (SIGTERM to the command, then SIGKILL
// to the whole pid namespace after a short grace), waits for it and closes
// every descriptor. Nothing of the wall remains afterwards. It is idempotent.
func (w *Wall) Close() error {
	w.closeOnce.Do(func() {
		started := w.life.Close()
		select {
		case <-w.exited:
		case <-w.ended:
			// The run is over; the init exits by itself.
			select {
			case <-w.exited:
			case <-time.After(closeGrace):
				w.init.kill()
				<-w.exited
			}
		default:
			if started {
				_ = w.ctl.send(message{Type: msgSignal, Signal: int(syscall.SIGTERM)})
				select {
				case <-w.exited:
				case <-time.After(closeGrace):
				}
			}
			w.init.kill()
			<-w.exited
		}
		w.ctl.Close()
		if started {
			<-w.endRead
		}
		if w.watchDone != nil {
			w.watchStop.Close()
			<-w.watchDone
		}
		w.lis.Close()
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

// withFirstError is the error of the init's clone with a user namespace,
// tried because the init could not be cloned without one; first says why
// (the clone failed, or the thread to clone it from could not be bounded).
type withFirstError struct {
	err, first error
}

func (e *withFirstError) Error() string {
	return fmt.Sprintf("%v (before that, without a user namespace: %v)", e.err, e.first)
}

func (e *withFirstError) Unwrap() error { return e.err }

// startInit starts the wall's init, the executable initPath, in new namespaces,
// in the cgroup of cgroupFD when it is not -1, with the control socket as its
// descriptor 3.
//
// A caller that holds the init's capabilities (root, as a rule) clones it
// with no user namespace, from a forker, which it returns; it is nil
// otherwise.
func startInit(initPath string, spec Spec, cfg *initConfig, cgroupFD int) (*initProc, *channel, *forker, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	childEnd := os.NewFile(uintptr(fds[1]), "wall-control-child")
	ctl, err := newChannel(os.NewFile(uintptr(fds[0]), "wall-control"))
	if err != nil {
		childEnd.Close()
		return nil, nil, nil, err
	}
	uid, gid := os.Getuid(), os.Getgid()
	userns := &syscall.SysProcAttr{
		Cloneflags:                 cloneFlags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                initCaps,
		Pdeathsig:                  syscall.SIGKILL,
		UseCgroupFD:                cgroupFD >= 0,
		CgroupFD:                   cgroupFD,
	}
	sys := userns
	var fk *forker
	// Why the init, whose caller holds its capabilities, was not cloned
	// without a user namespace: told if the clone with one fails too.
	var noUserns error
	if HoldsInitCaps() {
		if fk, err = newForker(); err == nil {
			sys = &syscall.SysProcAttr{Cloneflags: cloneFlags &^ unix.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL,
				UseCgroupFD: cgroupFD >= 0, CgroupFD: cgroupFD}
		} else {
			noUserns = fmt.Errorf("bound a thread to the init's capabilities: %w", err)
		}
	}
	argv := append([]string{initPath, InitArg}, netArgs(cfg.netPlan)...)
	// Descriptors 0, 1 and 2 are the run's streams (nil: /dev/null), 3 the
	// control socket.
	files := []*os.File{spec.Stdin, spec.Stdout, spec.Stderr, childEnd}
	var proc *initProc
	start := func(sys *syscall.SysProcAttr) {
		// The init is pid 1 of the run, whose /proc shows its environment:
		// it gets the run's, never more.
		proc, err = startProc(initPath, argv, cfg.Env, files, sys)
		for try := 0; errors.Is(err, syscall.ETXTBSY) && try < 20; try++ {
			// A kept init just written: a child this process forked
			// meanwhile held its descriptor until its own exec closed it.
			time.Sleep(time.Millisecond)
			proc, err = startProc(initPath, argv, cfg.Env, files, sys)
		}
	}
	if fk != nil {
		fk.run(func() { start(sys) })
		if err != nil {
			// Refused without a user namespace (by a security module, say):
			// cloned as for a caller without the capabilities.
			fk.release()
			fk = nil
			noUserns = err
			start(userns)
		}
	} else {
		start(sys)
	}
	childEnd.Close()
	if err != nil {
		ctl.Close()
		if noUserns != nil {
			// The user namespace's error is the one whose remedy applies
			// (see remedy_linux.go); the first is told beside it.
			err = &withFirstError{err: err, first: noUserns}
		}
		return nil, nil, nil, err
	}
	return proc, ctl, fk, nil
}
