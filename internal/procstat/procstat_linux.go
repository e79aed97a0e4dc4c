package procstat

import (
	"os"
	"strconv"
	"strings"
)

// StartTime is a process's start time in clock ticks since boot (field 22 of
// /proc/PID/stat), or 0 when it cannot be read. With the pid it names one
// process even after pids wrap.
func StartTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name, field 2, is in parentheses and may hold anything.
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
