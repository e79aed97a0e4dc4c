package container

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// minRlimit is as low as adapting goes: below it a container is not worth
// starting.
const minRlimit = 256

// adaptRlimit lowers the limit asked for resource after the runtime refused it:
// first to this process's own hard limit, then by halves. It reports false
// when there is nothing lower left to try.
func (e *Engine) adaptRlimit(resource int) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ulimits == nil {
		e.ulimits = map[int]uint64{}
	}
	cur, tried := e.ulimits[resource]
	var next uint64
	if !tried {
		var rl unix.Rlimit
		if err := unix.Getrlimit(resource, &rl); err != nil {
			return "", false
		}
		next = rl.Max
		if next == unix.RLIM_INFINITY {
			next = rl.Cur
		}
	} else {
		next = cur / 2
	}
	if next < minRlimit || next == unix.RLIM_INFINITY {
		return "", false
	}
	e.ulimits[resource] = next
	return fmt.Sprintf("%s=%d:%d", rlimitNames[resource], next, next), true
}

// hardLimits names this process's hard limits that engines' defaults meet.
func hardLimits() string {
	var nofile, nproc unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	_ = unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
	return fmt.Sprintf("nofile=%d,nproc=%d", nofile.Max, nproc.Max)
}
