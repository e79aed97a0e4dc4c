package dispatch

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// processStart is a process's start time in clock ticks since boot (field 22 of
// /proc/PID/stat), or 0. With the pid it names one process even after pids wrap.
func processStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// Alive reports whether the controller recorded in a run is still running.
func controllerAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	return processStart(pid) == start && start != 0
}
