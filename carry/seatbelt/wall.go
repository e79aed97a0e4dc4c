//go:build darwin || linux

package seatbelt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
)

// SandboxExec is macOS's launcher of a command under a profile.
const SandboxExec = "/usr/bin/sandbox-exec"

// ExecArg is the hidden first argument under which the postern binary (or a
// test binary, see Self) runs as the last step before the command: already
// inside the sandbox, it says so to Raise and executes the command. Its main
// must hand the rest of the arguments to ExecMain.
const ExecArg = "__seatbelt-exec"

// Self is the binary the launcher starts with ExecArg; "" is os.Executable.
var Self = ""

// Errors of a Wall.
var (
	// ErrCommandNotFound is the command not being found in the run's PATH.
	ErrCommandNotFound = errors.New("command not found")
	ErrNotStarted      = carry.ErrNotStarted
	ErrAlreadyStarted  = carry.ErrAlreadyStarted
)

// ProfileError is the launcher ending before the command started: macOS
// refused the profile (the launcher said why on the run's stderr) or has no
// sandbox-exec.
type ProfileError struct {
	Launcher string
	Code     int // the launcher's exit status
	Err      error
}

func (e *ProfileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s could not start the run under its profile: %v", e.Launcher, e.Err)
	}
	return fmt.Sprintf("%s refused the run's profile (exit status %d; its reason is on the run's stderr)", e.Launcher, e.Code)
}

func (e *ProfileError) Unwrap() error { return e.Err }

// Spec is one command to run under the connect-door profile.
type Spec struct {
	Run     string // the run's id, named in the profile
	Command []string
	// Dir is the working directory; "" keeps the caller's.
	Dir string
	// Env is the environment the run inherits; Env (the function) points its
	// tools at the door. nil is the caller's.
	Env    []string
	Policy *policy.Policy
	// NeverWritable are postern's own places (its records, its agent's
	// directory): guarded like the files programs outside obey.
	NeverWritable []string
	// Stdin, Stdout and Stderr are given to the command as they are; nil is
	// /dev/null.
	Stdin, Stdout, Stderr *os.File
	// TTY says Stdin is a terminal of the run's own: the command gets it as
	// its controlling terminal, in a session of its own. Otherwise the
	// command has a process group of its own.
	TTY bool
	// Launcher is the argv that starts a command under a profile, to which
	// "-p PROFILE" and the command are appended; nil is SandboxExec.
	Launcher []string
	Logger   *slog.Logger
}

// Wall is one command under the connect-door profile, with the door's
// listener beside it. The door itself is served by the caller (door.Run on
// Listeners).
type Wall struct {
	cmd      *exec.Cmd
	launcher string
	proxy    net.Listener
	hold6    int // the descriptor holding [::1] on the door's port, or -1
	port     uint16
	profile  string
	tmp      string
	ready    *os.File
	guards   map[string]fileState
	log      *slog.Logger

	life   carry.Life
	mu     sync.Mutex // guards waited
	waited bool

	closeOnce sync.Once
}

// portTries bounds how often Raise picks another port when [::1] is already
// taken on the one 127.0.0.1 gave.
const portTries = 8

// Raise opens the door's listener on 127.0.0.1, makes the run's temporary
// directory and profile, and prepares the command; Start starts it.
func Raise(ctx context.Context, spec Spec) (*Wall, error) {
	if len(spec.Command) == 0 {
		return nil, errors.New("seatbelt: no command")
	}
	log := spec.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	launcher := spec.Launcher
	if len(launcher) == 0 {
		launcher = []string{SandboxExec}
	}
	if _, err := os.Stat(launcher[0]); err != nil {
		return nil, &ProfileError{Launcher: launcher[0], Err: fmt.Errorf("%w (it ships with macOS; a Mac without it cannot give this carry)", err)}
	}
	self := Self
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("seatbelt: find postern's own binary: %w", err)
		}
	}
	if _, err := lookPath(spec.Command[0], getenv(env, "PATH"), spec.Dir); err != nil {
		return nil, err
	}

	l, hold6, err := listenDoor(ctx)
	if err != nil {
		return nil, err
	}
	w := &Wall{proxy: l, hold6: hold6, port: uint16(l.Addr().(*net.TCPAddr).Port), log: log, launcher: launcher[0]}
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()

	// The run's own temporary directory: its TMPDIR, the one place its unix
	// sockets may be, removed with the wall.
	sharedTmp := getenv(env, "TMPDIR")
	if sharedTmp == "" {
		sharedTmp = os.TempDir()
	}
	if w.tmp, err = os.MkdirTemp(sharedTmp, "postern-run-"); err != nil {
		if w.tmp, err = os.MkdirTemp("", "postern-run-"); err != nil {
			return nil, fmt.Errorf("seatbelt: the run's temporary directory: %w", err)
		}
	}
	dir := spec.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	places := PlacesFor(PlacesSpec{
		Dir:           dir,
		Home:          getenv(env, "HOME"),
		Temp:          []string{w.tmp, "/tmp", "/var/tmp", sharedTmp},
		NeverWritable: append([]string{self}, spec.NeverWritable...),
	})
	if w.profile, err = Profile(ProfileSpec{Run: spec.Run, Policy: spec.Policy, DoorPort: w.port, Places: places}); err != nil {
		return nil, err
	}
	w.guards = watchGuards(places.Guarded)

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seatbelt: pipe: %w", err)
	}
	w.ready = readyR
	args := append(append(append([]string(nil), launcher...), "-p", w.profile, self, ExecArg), spec.Command...)
	w.cmd = &exec.Cmd{
		Path: launcher[0], Args: args, Dir: spec.Dir, Env: Env(env, w.port, w.tmp),
		Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr,
		ExtraFiles: []*os.File{readyW},
	}
	if spec.TTY && spec.Stdin != nil {
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	log.Debug("seatbelt raised", "run", spec.Run, "door", l.Addr().String(), "tmp", w.tmp, "writable", places.Writable, "guarded", len(places.Guarded))
	ok = true
	return w, nil
}

// listenDoor opens the door's proxy listener on 127.0.0.1 and holds [::1] on
// the same port, bound but not listening, so that no other program can listen
// there: the profile's "localhost" is both addresses. Where [::1] is not
// configured nothing can listen on it either.
func listenDoor(ctx context.Context) (net.Listener, int, error) {
	var lc net.ListenConfig
	for try := 1; ; try++ {
		l, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, -1, fmt.Errorf("seatbelt: open the door's listener on 127.0.0.1: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		fd, err := holdLoopback6(port)
		if err == nil {
			return l, fd, nil
		}
		l.Close()
		// Another program has [::1] on this port: take another.
		if !errors.Is(err, unix.EADDRINUSE) || try == portTries {
			return nil, -1, fmt.Errorf("seatbelt: hold [::1]:%d beside the door: %w", port, err)
		}
	}
}

// holdLoopback6 binds a TCP socket to [::1]:port without listening. It
// returns -1 and no error when this host has no [::1].
func holdLoopback6(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return -1, nil
		}
		return -1, fmt.Errorf("socket: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("IPV6_V6ONLY: %w", err)
	}
	sa := &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return -1, nil
		}
		return -1, err
	}
	return fd, nil
}

// Listeners are the door's: the explicit proxy only.
func (w *Wall) Listeners() door.Listeners { return door.Listeners{Proxy: w.proxy} }

// Port is the door's port on 127.0.0.1.
func (w *Wall) Port() uint16 { return w.port }

// Profile is the run's SBPL profile.
func (w *Wall) Profile() string { return w.profile }

// Env is the command's environment.
func (w *Wall) Env() []string { return w.cmd.Env }

// TempDir is the run's own temporary directory.
func (w *Wall) TempDir() string { return w.tmp }

// Start starts the command under the profile and returns once it runs
// inside the sandbox, or when ctx is done. A launcher that ends before is a
// *ProfileError.
func (w *Wall) Start(ctx context.Context) error {
	if err := w.life.BeginStart(); err != nil {
		return err
	}
	err := w.cmd.Start()
	w.cmd.ExtraFiles[0].Close()
	if cerr := w.life.EndStart(err == nil); cerr != nil {
		// Closed while it started: nothing of the run may outlive the wall.
		if err == nil {
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			_, _ = w.wait()
		}
		return cerr
	}
	if err != nil {
		return &ProfileError{Launcher: w.launcher, Err: err}
	}
	var b [1]byte
	stop := context.AfterFunc(ctx, func() { _ = w.ready.SetReadDeadline(time.Now()) })
	n, _ := io.ReadFull(w.ready, b[:])
	stop()
	w.ready.Close()
	if n == 1 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Given up on: the launcher may still be on its way; it is ended.
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		_, _ = w.wait()
		return fmt.Errorf("seatbelt: start %q: %w", w.launcher, err)
	}
	// The launcher ended without starting postern's last step.
	code, _ := w.wait()
	return &ProfileError{Launcher: w.launcher, Code: code}
}

// Signal sends sig to the command's process group (its session's, with a
// terminal).
func (w *Wall) Signal(sig syscall.Signal) error {
	if err := w.life.CanSignal(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waited {
		return nil
	}
	return syscall.Kill(-w.cmd.Process.Pid, sig)
}

// Wait waits for the command and then kills what it left running in its
// process group. It returns the exit status, 128+n for signal n.
func (w *Wall) Wait() (int, error) {
	if !w.life.Started() {
		return -1, ErrNotStarted
	}
	return w.wait()
}

func (w *Wall) wait() (int, error) {
	err := w.cmd.Wait()
	w.mu.Lock()
	w.waited = true
	pid := w.cmd.Process.Pid
	w.mu.Unlock()
	// The group outlives its leader only in what the run left running.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	ps := w.cmd.ProcessState
	if ps == nil {
		return -1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// GuardChanges are the guarded paths that are not what they were before the
// run (see GuardChange). Call it once the run is over.
func (w *Wall) GuardChanges() []GuardChange { return guardChanges(w.guards) }

// Close kills the command's process group if it still runs, closes the
// door's listener and the hold on [::1], and removes the run's temporary
// directory. It is idempotent.
func (w *Wall) Close() error {
	var first bool
	w.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	started := w.life.Close()
	w.mu.Lock()
	if started && !w.waited {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
	w.mu.Unlock()
	if w.proxy != nil {
		w.proxy.Close()
	}
	if w.hold6 >= 0 {
		unix.Close(w.hold6)
		w.hold6 = -1
	}
	if w.ready != nil {
		w.ready.Close()
	}
	if w.cmd != nil && !started {
		w.cmd.ExtraFiles[0].Close()
	}
	if w.tmp != "" {
		return os.RemoveAll(w.tmp)
	}
	return nil
}

// ExecMain is postern's last step inside the sandbox (see ExecArg): it tells
// Raise on descriptor 3 that the profile holds, then executes argv. It returns
// only on failure; a command that is not found is ErrCommandNotFound.
func ExecMain(argv []string) error {
	ready := os.NewFile(3, "seatbelt-ready")
	if ready == nil {
		return errors.New("seatbelt: no ready descriptor")
	}
	_, werr := ready.Write([]byte{1})
	ready.Close()
	if werr != nil {
		return fmt.Errorf("seatbelt: tell the launcher: %w", werr)
	}
	if len(argv) == 0 {
		return errors.New("seatbelt: no command")
	}
	wd, _ := os.Getwd()
	path, err := lookPath(argv[0], os.Getenv("PATH"), wd)
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// lookPath finds name as a shell would in path; a name with a slash is taken
// as it is, relative to dir.
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if isExecutable(p) {
			return name, nil
		}
		return "", fmt.Errorf("%w: %q", ErrCommandNotFound, name)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q in PATH %q", ErrCommandNotFound, name, path)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func getenv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// String names the wall for logs.
func (w *Wall) String() string { return "seatbelt door 127.0.0.1:" + strconv.Itoa(int(w.port)) }
