package netwall

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errUseStage says the command must be started through the ExecArg stage.
var errUseStage = errors.New("start through the exec stage")

// dropped is a thread of this process that gives up, for itself, what the
// ExecArg stage gives up before its exec (ExecDropped): every capability,
// with the securebits locked and no_new_privs set, under the filter
// refusing setuid and setgid files, with every descriptor above 2
// close-on-exec; then forks and execs the command, once, when start asks.
// Credentials, no_new_privs and the filter are a thread's own, and a child
// has its forking thread's; the thread is locked to its goroutine and ends
// with it, so nothing else of the init ever runs on it, and the Go runtime
// starts no thread from a locked one; it is never the main thread, which
// /proc shows as the init. While it lasts, the init being not dumpable (see
// Init) keeps it, like every thread of the init, out of the command's reach
// through /proc, once there is a command. So the command starts as the
// stage would have started it, without a start of this binary in between;
// and with the thread made while the host answers the init's ready, the
// start waits for little more than the fork.
type dropped struct {
	path string
	env  []string
	// given says whether the thread has given it all up (nil) or not
	// (errUseStage); fork takes what to start; started gives the pid.
	given   chan error
	fork    chan forkRequest
	started chan droppedStart
}

type forkRequest struct {
	argv []string
	attr *syscall.ProcAttr
}

type droppedStart struct {
	pid int
	err error
}

// prepareDropped makes the dropped thread that starts argv0 in env. It
// returns nil, having made nothing, where the stage has more to do or would
// answer differently: Landlock to apply, a command not found or found
// through a relative PATH entry (the stage's exit 127 and its message).
func prepareDropped(argv0 string, env []string) *dropped {
	for _, kv := range env {
		if strings.HasPrefix(kv, LandlockEnv+"=") {
			return nil
		}
	}
	path, env, ok := lookCommand(argv0, env)
	if !ok {
		return nil
	}
	d := &dropped{path: path, env: env, given: make(chan error, 1),
		fork: make(chan forkRequest), started: make(chan droppedStart, 1)}
	onOwnThread(d.serve)
	return d
}

// onOwnThread runs fn in a goroutine of its own, locked to a thread that is
// not the main thread and that ends with fn (the lock is never given up):
// what fn changes of its thread (credentials, a seccomp filter, a namespace)
// nothing else of the process ever runs with. The main thread is the one
// /proc shows as the process (for the init, pid 1 of the run), and a locked
// goroutine that ends on it parks it rather than ending it: where the
// goroutine lands on it, it holds it untouched and runs fn on another.
func onOwnThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		defer runtime.UnlockOSThread()
		held := make(chan struct{})
		go func() {
			defer close(held)
			runtime.LockOSThread()
			fn()
		}()
		<-held
	}()
}

// serve is the dropped thread's life.
func (d *dropped) serve() {
	// Never unlocked: the thread goes when this goroutine ends.
	runtime.LockOSThread()
	// Where a step fails, the stage fails the same way and says so as it
	// always has (exit 126, or 127 for a command not found).
	if dropPrivileges() != nil || installSetIDFilter(0) != nil {
		d.given <- errUseStage
		return
	}
	d.given <- nil
	req := <-d.fork
	// Here, not before: a descriptor the init opened meanwhile is covered.
	if closeInherited() != nil {
		d.started <- droppedStart{err: errUseStage}
		return
	}
	pid, err := syscall.ForkExec(d.path, req.argv, req.attr)
	if err != nil {
		err = errUseStage
	}
	d.started <- droppedStart{pid, err}
}

// start forks and execs argv from the dropped thread with attr, in the
// environment the command was looked up in (see lookCommand). It returns
// errUseStage, having started nothing, where the thread could not give it
// all up, or the fork or exec failed (the stage's 126).
func (d *dropped) start(argv []string, attr *syscall.ProcAttr) (int, error) {
	if err := <-d.given; err != nil {
		return 0, err
	}
	d.fork <- forkRequest{argv, &syscall.ProcAttr{Dir: attr.Dir, Env: d.env, Files: attr.Files, Sys: attr.Sys}}
	s := <-d.started
	return s.pid, s.err
}

// lookCommand finds name as the stage does (exec.LookPath), in env's PATH or
// the default one where that is empty, which the command's environment then
// gets as os.Setenv would set it; it returns the path and the command's
// environment. ok is false where the stage must decide: name not found, or a
// relative PATH entry, whose meaning depends on the working directory.
func lookCommand(name string, env []string) (path string, out []string, ok bool) {
	if strings.Contains(name, "/") {
		return name, env, true
	}
	at, pathVar := -1, ""
	for i, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			at, pathVar = i, v
			break // env has each variable once (dedupEnv)
		}
	}
	if pathVar == "" {
		pathVar = defaultPath
		env = slices.Clone(env)
		if at >= 0 {
			env[at] = "PATH=" + defaultPath
		} else {
			env = append(env, "PATH="+defaultPath)
		}
	}
	dirs := filepath.SplitList(pathVar)
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) {
			return "", nil, false
		}
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if executable(p) {
			return p, env, true
		}
	}
	return "", nil, false
}

// executable is exec.LookPath's test of a candidate: not a directory, and
// executable for this process's effective ids.
func executable(p string) bool {
	st, err := os.Stat(p)
	if err != nil || st.IsDir() {
		return false
	}
	err = unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return st.Mode()&0o111 != 0
	}
	return err == nil
}
