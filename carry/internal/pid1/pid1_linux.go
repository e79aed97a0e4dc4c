package pid1

import (
	"context"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// KilledStatus is the status Supervise returns when it killed the run: as a
// shell reports a command ended by SIGKILL.
const KilledStatus = 128 + int(syscall.SIGKILL)

// Command is the command pid 1 supervises.
type Command struct {
	// Pid is the command's pid; it leads its own process group.
	Pid int
	// Signals are the signals the process receives; each goes to the
	// command's group unless Local takes it.
	Signals <-chan os.Signal
	// Requests are the signals the host side asks to forward to the group.
	// Its close means the host side is gone: nothing may outlive it.
	Requests <-chan syscall.Signal
	// Local, when set, handles a received signal instead of forwarding it and
	// reports whether it did.
	Local func(syscall.Signal) bool
	// Ended, when set, runs once the command has ended, before Supervise
	// returns its status.
	Ended func()
}

// Supervise reaps every process until the command ends and returns the status
// to exit with: the command's, 128+n when signal n ended it. When ctx is done
// or Requests is closed, it kills every process and returns KilledStatus.
//
// The reaper it starts ends with the process: the caller's return is its exit.
func Supervise(ctx context.Context, c Command) int {
	status := make(chan syscall.WaitStatus, 1)
	go Reap(c.Pid, status)
	for {
		select {
		case ws := <-status:
			if c.Ended != nil {
				c.Ended()
			}
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		case s := <-c.Signals:
			sig, ok := s.(syscall.Signal)
			if !ok || (c.Local != nil && c.Local(sig)) {
				continue
			}
			_ = unix.Kill(-c.Pid, sig)
		case sig, ok := <-c.Requests:
			if !ok {
				KillAll(c.Pid)
				return KilledStatus
			}
			_ = unix.Kill(-c.Pid, sig)
		case <-ctx.Done():
			KillAll(c.Pid)
			return KilledStatus
		}
	}
}

// Reap waits for every child and sends the status of the command, pid, once it
// has exited or been killed. It returns when there is no child left to wait for.
func Reap(pid int, status chan<- syscall.WaitStatus) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if got == pid && (ws.Exited() || ws.Signaled()) {
			status <- ws
		}
	}
}

// KillAll kills every process of the run: as pid 1, every other process of
// the pid namespace; otherwise the process group led by pid.
func KillAll(pid int) {
	if os.Getpid() == 1 {
		_ = unix.Kill(-1, unix.SIGKILL)
		return
	}
	_ = unix.Kill(-pid, unix.SIGKILL)
}
