package netwall

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// initProc is the wall's init as started: cloned with syscall's StartProcess
// rather than os/exec. os/exec's first start in a process checks that pidfds
// work by cloning a test child and waiting for it (0.4–0.5 ms on a two-core
// machine), and a local run's init is the one process postern starts: that
// check was all on the run's chain.
type initProc struct {
	pid  int
	path string
	argv []string

	mu     sync.Mutex // held across the reap, so that kill never finds a reused pid
	reaped bool
}

// startProc starts path with argv and env, files as its descriptors 0, 1, 2,
// 3, … (nil: /dev/null), cloned as sys says. Its error is os/exec's: a
// *os.PathError of "fork/exec" around the errno.
func startProc(path string, argv, env []string, files []*os.File, sys *syscall.SysProcAttr) (*initProc, error) {
	fds := make([]uintptr, len(files))
	var null *os.File
	for i, f := range files {
		if f == nil {
			if null == nil {
				var err error
				if null, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
					return nil, err
				}
				defer null.Close()
			}
			f = null
		}
		fds[i] = f.Fd()
	}
	pid, _, err := syscall.StartProcess(path, argv, &syscall.ProcAttr{Env: env, Files: fds, Sys: sys})
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: path, Err: err}
	}
	return &initProc{pid: pid, path: path, argv: argv}, nil
}

// wait waits for the init to exit and reaps it.
func (p *initProc) wait() (syscall.WaitStatus, error) {
	// Waited for without reaping first: the pid stays the init's until
	// the reap below, which kill cannot overtake.
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waitid: %w", err)
		}
		break
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		p.reaped = true
		if err != nil {
			return 0, fmt.Errorf("wait4: %w", err)
		}
		return ws, nil
	}
}

// kill sends the init SIGKILL unless it has been reaped.
func (p *initProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// statusText says how a process ended, as os.ProcessState says it.
func statusText(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}
