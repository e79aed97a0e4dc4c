//go:build !postern_wallinit

package netwall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/netwall/ownns"
	"github.com/postern-dev/postern/internal/kernel"
	"github.com/postern-dev/postern/internal/wallimage"
)

// The wall set up by postern itself, with a small pid 1.
//
// A Go init costs every run two starts of the Go runtime and the death of a
// Go process (see docs/BENCHMARKS.md, the wall's start-up passes). Where the
// caller holds the init's capabilities, the run needs no user namespace,
// and everything but the run's pid 1 can be done by a thread of postern's:
// the forker, already locked to its goroutine and bounded to initCaps,
// unshares the mount, network, IPC, UTS and pid namespaces for itself, and
// makes the mounts there; a second locked thread joins the network
// namespace and sets it up beside them. Neither is ever unlocked: each ends
// with its goroutine, and the Go runtime makes new threads from its template
// thread, never from a locked one, so nothing else of postern's ever runs in
// the run's namespaces. pid 1 is a small static C program (pid1c/pid1.c),
// cloned from the forker into the new pid namespace first: the run's /proc
// is mounted for that namespace by the forker (procfs's pidns option, Linux
// 6.18), pid 1 sets its namespace's pid_max, and, when told, forks the
// command with every privilege dropped, forwards signals, reaps, and says
// how the command ended.
//
// The host side of the wall is unchanged: it speaks the init's messages
// over a socketpair to a goroutine of postern's (serveFast), which does what
// the Go init does with them.

// pid1 control records (pid1c/pid1.c): a 16-byte header, then the payload.
const (
	p1Setup  = 1 // to pid 1: a = pid_max (0: none)
	p1Go     = 2 // to pid 1: the command's path, NUL, the seccomp program
	p1Signal = 3 // to pid 1: a = signal for the command's group

	p1Ready   = 1 // from pid 1: a = errno of the pid_max write
	p1Started = 2 // from pid 1: a = the command's pid in the run
	p1Failed  = 3 // from pid 1: a = step, b = errno
	p1Done    = 4 // from pid 1: a = wait status, b = 1 if all reaped

	p1HeaderLen = 16
)

// pid1Prefix starts the name of the wall's small pid 1 kept beside the Go
// init in an InitDir, where ownns finds it before postern's own start.
const pid1Prefix = ownns.Pid1Prefix

// InitEnv, set to "go", has every run start the wall's Go init as before,
// even where postern could set the wall up itself: a way to compare the two,
// and to tell a problem of one from the other's.
const InitEnv = ownns.InitEnv

// fastLane says whether the run can be set up by postern with the small pid
// 1 at pid1 rather than by the Go init: the caller holds the init's
// capabilities, the kernel mounts a /proc for another pid namespace, and
// the run asks nothing only the Go init does (a terminal to relay, Landlock
// for the exec stage, a PATH with relative entries, whose meaning the stage
// decides).
func fastLane(spec Spec, cfg *initConfig, pid1 string) bool {
	if pid1 == "" || spec.TTY || os.Getenv(InitEnv) == "go" || !kernel.AtLeast(6, 18) || !HoldsInitCaps() {
		return false
	}
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, LandlockEnv+"=") {
			return false
		}
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && !strings.Contains(cfg.Command[0], "/") {
			for _, dir := range filepath.SplitList(v) {
				if !filepath.IsAbs(dir) {
					return false
				}
			}
		}
	}
	return true
}

// SetsUpItself says whether a run on this machine will most likely have its
// wall set up by postern itself (see fastLane): root holding the init's
// capabilities, on a kernel that mounts a /proc for another pid namespace.
// Whether the binary carries the small pid 1, and what the run asks, are
// only known at Raise.
func SetsUpItself() bool {
	return os.Getenv(InitEnv) != "go" && kernel.AtLeast(6, 18) && HoldsInitCaps()
}

// keptPid1 is the small pid 1 attached to this binary's Go init (kept at
// initPath), kept beside it in dir, or "" where none is attached. Its name is
// the init's own with pid1Prefix: a run finds it without reading the init. It
// is written where it is not there as written, from this binary's own bytes
// (the init's image, which carries it in turn), checked against its SHA-256:
// the kept init's pages are left as they are (see internal/hugetext).
func keptPid1(dir, initPath string) (string, error) {
	sum, ok := strings.CutPrefix(filepath.Base(initPath), keptPrefix)
	if !ok {
		return "", nil
	}
	path := filepath.Join(dir, pid1Prefix+sum)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG &&
		int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0 && st.Size > 0 {
		return path, nil
	}
	img, err := attachedPid1()
	if err != nil || img.Size == 0 {
		return "", err
	}
	if err := writeKept(path, "/proc/self/exe", img); err != nil {
		return "", err
	}
	pruneKept(dir, pid1Prefix, path)
	return path, nil
}

// attachedPid1 is the small pid 1 attached to the end of this binary's Go
// init image, as an image of this binary; its Size is 0 where there is none.
func attachedPid1() (wallimage.Image, error) {
	img, err := attached()
	if errors.Is(err, wallimage.ErrNone) {
		return wallimage.Image{}, nil
	}
	if err != nil {
		return wallimage.Image{}, err
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return wallimage.Image{}, err
	}
	defer f.Close()
	inner, err := wallimage.Find(io.NewSectionReader(f, img.Offset, img.Size), img.Size)
	if errors.Is(err, wallimage.ErrNone) {
		return wallimage.Image{}, nil
	}
	if err != nil {
		return wallimage.Image{}, err
	}
	inner.Offset += img.Offset
	return inner, nil
}

// commandEnv is env as the command gets it: PATH set to the default where it
// is empty, as the exec stage sets it (pid1.LookPath).
func commandEnv(env []string) []string {
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			if v != "" {
				return env
			}
			out := append([]string(nil), env...)
			out[i] = "PATH=" + defaultPath
			return out
		}
	}
	return append(env[:len(env):len(env)], "PATH="+defaultPath)
}

// runNamespaces are what the forker unshares for the run: all of a run's but
// the user namespace, which it has none of, and the network namespace,
// which the network's own thread makes beside it (see startFast). CLONE_FS
// gives the thread a root and working directory of its own, which a new
// mount namespace needs.
const runNamespaces = unix.CLONE_FS | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWPID

// enterRun bounds the calling thread's own capabilities to initCaps, as the
// Go init's are, and moves it into new namespaces for the run.
func enterRun() error {
	data, err := threadCaps()
	if err != nil {
		return fmt.Errorf("read the thread's capabilities: %w", err)
	}
	var keep [2]uint32
	for _, c := range initCaps {
		keep[c/32] |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Effective &= keep[i]
		data[i].Permitted &= keep[i]
		data[i].Inheritable = 0
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("bound the thread's capabilities: %w", err)
	}
	if err := passCapsOnExec(); err != nil {
		return fmt.Errorf("keep pid 1's capabilities across its exec: %w", err)
	}
	if err := unix.Unshare(runNamespaces); err != nil {
		return fmt.Errorf("unshare the run's namespaces: %w", err)
	}
	return nil
}

// newNetns moves the calling thread into a new network namespace and
// returns its descriptor.
func newNetns() (*os.File, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("unshare the run's network namespace: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the run's network namespace: %w", err)
	}
	return os.NewFile(uintptr(fd), "wall-netns"), nil
}

// pid1Path, where set, is the small pid 1 every run starts, whatever
// InitDir holds (the package's tests build it).
var pid1Path string

// errNoFast says the run could not be set up by postern, and nothing of it
// was made: the Go init is started instead.
var errNoFast = errors.New("the wall cannot be set up by postern here")

// startFast raises the run's namespaces on a forker, starts pid1 as their
// pid 1, in the cgroup of cgroupFD when it is not -1, and serves the Go
// init's messages on the channel it returns. An error wrapping errNoFast
// left nothing behind: pid 1 did not start. pid 1 starts once planned says
// the run's layout is planned; its error, if it has one, is returned as it
// is, nothing spawned.
func startFast(pid1 string, spec Spec, cfg *initConfig, cgroupFD int, planned func() error) (*initProc, *channel, *forker, error) {
	fk, err := newForker()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", errNoFast, err)
	}
	fail := func(err error) (*initProc, *channel, *forker, error) {
		fk.release()
		return nil, nil, nil, err
	}
	p1fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("%w: pid 1's socketpair: %v", errNoFast, err))
	}
	p1Child := os.NewFile(uintptr(p1fds[1]), "wall-pid1-child")
	defer p1Child.Close()
	p1, err := newPid1Link(os.NewFile(uintptr(p1fds[0]), "wall-pid1"))
	if err != nil {
		return fail(fmt.Errorf("%w: %v", errNoFast, err))
	}
	argv := []string{pid1, "-dir", cfg.Dir}
	if cfg.NProc > 0 {
		argv = append(argv, "-nproc", strconv.FormatUint(cfg.NProc, 10))
	}
	if os.Geteuid() != 0 {
		// postern is in a user namespace of its own (HoldsInitCaps): the
		// command gets one below it, where RLIMIT_NPROC counts its
		// processes alone.
		argv = append(argv, "-userns")
	}
	argv = append(append(argv, "--"), cfg.Command...)
	env := commandEnv(cfg.Env)
	files := []*os.File{spec.Stdin, spec.Stdout, spec.Stderr, p1Child}
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, UseCgroupFD: cgroupFD >= 0, CgroupFD: cgroupFD}
	// The network beside the mounts, on a thread of its own that makes the
	// run's network namespace and hands it to pid 1 (fastProc).
	netDone := make(chan network, 1)
	netns := make(chan netnsMade, 1)
	plan := cfg.netPlan
	onOwnThread(func() {
		f, err := newNetns()
		netns <- netnsMade{f, err}
		if err != nil {
			netDone <- network{werr: stepError(StepLoopback, err)}
			return
		}
		netDone <- makeNetwork(plan)
	})
	var proc *initProc
	var planErr error
	fk.run(func() {
		if err = enterRun(); err != nil {
			return
		}
		if planErr = planned(); planErr != nil {
			return
		}
		proc, err = startProc(pid1, argv, env, files, sys)
		for try := 0; errors.Is(err, syscall.ETXTBSY) && try < 20; try++ {
			// Kept just now: see startInit.
			time.Sleep(time.Millisecond)
			proc, err = startProc(pid1, argv, env, files, sys)
		}
	})
	if err != nil || planErr != nil {
		p1.close()
		// Nothing of the run's network is wanted.
		go discardNet(netns, netDone)
		if planErr != nil {
			return fail(planErr)
		}
		// The forker, in the namespaces made, ends with them.
		return fail(fmt.Errorf("%w: %v", errNoFast, err))
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		p1.close() // pid 1 kills what there is and exits
		go discardNet(netns, netDone)
		return proc, nil, fk, fmt.Errorf("control socketpair: %w", err)
	}
	ctl, err := newChannel(os.NewFile(uintptr(fds[0]), "wall-control"))
	if err != nil {
		unix.Close(fds[1])
		p1.close()
		go discardNet(netns, netDone)
		return proc, nil, fk, err
	}
	inside, err := newChannel(os.NewFile(uintptr(fds[1]), "wall-control-inside"))
	if err != nil {
		ctl.Close()
		p1.close()
		go discardNet(netns, netDone)
		return proc, nil, fk, err
	}
	go serveFast(inside, p1, fk, netns, netDone)
	return proc, ctl, fk, nil
}

// discardNet closes what the network's thread made, once it has.
func discardNet(netns <-chan netnsMade, netDone <-chan network) {
	if n := <-netns; n.f != nil {
		n.f.Close()
	}
	closeFiles((<-netDone).files)
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// serveFast does with the host side's messages what the Go init does (Init):
// takes the configuration, makes the run's mounts on the forker beside the
// network (netDone), answers ready with the door's listeners, has pid 1
// start the command, passes signals on and sends the ending. It ends when
// the host side or pid 1 goes; pid 1, its socket closed, kills the run.
func serveFast(ctl *channel, p1 *pid1Link, fk *forker, netns <-chan netnsMade, netDone <-chan network) {
	defer ctl.Close()
	defer p1.close()
	var n network
	netTaken := false
	defer func() {
		if !netTaken {
			go func() { closeFiles((<-netDone).files) }()
		}
	}()
	m, files, err := ctl.recv()
	closeFiles(files)
	if err != nil || m.Type != msgConfig || m.Config == nil {
		return
	}
	cfg := *m.Config
	var view *mounted
	var pidMaxErr string
	var path string
	netnsTaken := false
	defer func() {
		if !netnsTaken {
			go func() {
				if n := <-netns; n.f != nil {
					n.f.Close()
				}
			}()
		}
	}()
	proc := func() error {
		netnsTaken = true
		return fastProc(p1, netns, cfg.PidMax, &pidMaxErr)
	}
	if !fk.run(func() {
		view, err = privateMounts(cfg, proc)
		if err == nil {
			// In the run's view: what the command finds is what the
			// run has.
			path, _, _ = lookCommand(cfg.Command[0], cfg.Env)
		}
	}) {
		return
	}
	n, netTaken = <-netDone, true
	var werr *wireError
	switch {
	case n.werr != nil:
		werr = n.werr
	case err != nil:
		var oe *overlayError
		if errors.As(err, &oe) {
			werr = stepError(StepOverlay, err)
		} else {
			werr = stepError(StepMount, err)
		}
	}
	if werr != nil {
		closeFiles(n.files)
		if view != nil {
			view.close()
		}
		_ = ctl.send(message{Type: msgError, Err: werr})
		return
	}
	defer view.close()
	err = ctl.send(message{Type: msgReady, PidMaxErr: pidMaxErr}, n.files...)
	closeFiles(n.files)
	if err != nil {
		return
	}
	prog, err := setIDProgram()
	if err != nil {
		_ = ctl.send(message{Type: msgError, Err: &wireError{Step: "start", Message: err.Error()}})
		return
	}
	if m, files, err = ctl.recv(); err != nil || m.Type != msgStart {
		closeFiles(files)
		return
	}
	closeFiles(files)
	if err := p1.send(p1Go, int32(len(path)+1), 0, goPayload(path, prog)); err != nil {
		return
	}
	h, err := p1.recv()
	if err != nil {
		return
	}
	if h.typ != p1Started {
		_ = ctl.send(message{Type: msgError, Err: &wireError{Step: "start", Message: pid1Failure(h)}})
		return
	}
	if err := ctl.send(message{Type: msgStarted, Pid: int(h.a)}); err != nil {
		return
	}
	// The host's signals, until it goes; its going ends pid 1's socket,
	// and so the run.
	go func() {
		for {
			m, files, err := ctl.recv()
			closeFiles(files)
			if err != nil {
				p1.close()
				return
			}
			if m.Type == msgSignal {
				_ = p1.send(p1Signal, int32(m.Signal), 0, nil)
			}
		}
	}()
	for {
		if h, err = p1.recv(); err != nil {
			return
		}
		if h.typ == p1Done {
			break
		}
	}
	ending := view.finish()
	end := message{Type: msgEnded, Ending: &ending}
	if h.b == 1 {
		status := shellStatus(syscall.WaitStatus(h.a))
		end.Status = &status
	}
	_ = ctl.send(end)
}

// shellStatus is a command's status as a shell gives it: 128+n for signal n.
func shellStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// netnsMade is the run's network namespace as the network's thread made it.
type netnsMade struct {
	f   *os.File
	err error
}

// fastProc mounts the run's /proc for pid 1's pid namespace, which the
// forker is not in, and hands pid 1 the run's network namespace (netns) to
// join and has it set its pid namespace's pid_max there, before /proc/sys is
// sealed (which would refuse the write); *pidMaxErr says why it could not,
// where it was asked.
func fastProc(p1 *pid1Link, netns <-chan netnsMade, pidMax int, pidMaxErr *string) error {
	// The host's /proc, covered next, still names the forker's namespace
	// for its children, which pid 1's is: pid 1's own entry would not do,
	// as it is not dumpable, and the forker has no CAP_SYS_PTRACE.
	const opts = "pidns=/proc/thread-self/ns/pid_for_children"
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount a fresh /proc (%s): %w", opts, err)
	}
	n := <-netns
	if n.err != nil {
		return n.err
	}
	err := p1.send(p1Setup, int32(pidMax), 0, nil, n.f)
	n.f.Close()
	if err != nil {
		return fmt.Errorf("pid 1: %w", err)
	}
	h, err := p1.recv()
	if err != nil {
		return fmt.Errorf("pid 1: %w", err)
	}
	if h.typ != p1Ready {
		return errors.New(pid1Failure(h))
	}
	if pidMax > 0 && h.a != 0 {
		*pidMaxErr = fmt.Sprintf("write /proc/sys/kernel/pid_max: %v", syscall.Errno(h.a))
	}
	return nil
}

// goPayload is the go record's payload: path, NUL, the program's
// instructions as struct sock_filter.
func goPayload(path string, prog []unix.SockFilter) []byte {
	b := make([]byte, 0, len(path)+1+8*len(prog))
	b = append(append(b, path...), 0)
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// pid1Failure says what a record other than the one expected says.
func pid1Failure(h pid1Header) string {
	if h.typ == p1Failed {
		steps := map[int32]string{1: "read its control record", 2: "fork the command", 4: "its setup", 5: "join the run's network namespace"}
		step := steps[h.a]
		if step == "" {
			step = "step " + strconv.Itoa(int(h.a))
		}
		return fmt.Sprintf("the wall's pid 1 could not %s: %v", step, syscall.Errno(h.b))
	}
	return fmt.Sprintf("the wall's pid 1 sent record %d out of turn", h.typ)
}

// pid1Link is postern's end of pid 1's control socket (SOCK_SEQPACKET: a
// record per read).
type pid1Link struct {
	conn *net.UnixConn
}

type pid1Header struct {
	typ  uint32
	a, b int32
}

// newPid1Link takes ownership of f, postern's end of pid 1's socket.
func newPid1Link(f *os.File) (*pid1Link, error) {
	uc, err := unixConn(f, "pid 1's socket")
	if err != nil {
		return nil, err
	}
	return &pid1Link{conn: uc}, nil
}

// send sends a record, with f's descriptor if f is not nil.
func (l *pid1Link) send(typ uint32, a, b int32, payload []byte, f ...*os.File) error {
	rec := make([]byte, p1HeaderLen, p1HeaderLen+len(payload))
	binary.NativeEndian.PutUint32(rec[0:], typ)
	binary.NativeEndian.PutUint32(rec[4:], uint32(a))
	binary.NativeEndian.PutUint32(rec[8:], uint32(b))
	binary.NativeEndian.PutUint32(rec[12:], uint32(len(payload)))
	var oob []byte
	if len(f) > 0 && f[0] != nil {
		oob = unix.UnixRights(int(f[0].Fd()))
	}
	_, _, err := l.conn.WriteMsgUnix(append(rec, payload...), oob, nil)
	runtime.KeepAlive(f)
	return err
}

func (l *pid1Link) recv() (pid1Header, error) {
	var rec [p1HeaderLen]byte
	n, err := l.conn.Read(rec[:])
	if err != nil {
		return pid1Header{}, err
	}
	if n != p1HeaderLen {
		return pid1Header{}, fmt.Errorf("pid 1 sent a record of %d bytes, want %d", n, p1HeaderLen)
	}
	return pid1Header{typ: binary.NativeEndian.Uint32(rec[0:]), a: int32(binary.NativeEndian.Uint32(rec[4:])),
		b: int32(binary.NativeEndian.Uint32(rec[8:]))}, nil
}

func (l *pid1Link) close() { l.conn.Close() }
