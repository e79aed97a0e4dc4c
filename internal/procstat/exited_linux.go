package procstat

import (
	"os"
	"strconv"
	"strings"
)

// Exited reports whether pid is a process that has ended but is not yet
// reaped (a zombie): it still has its start time, and runs nothing.
func Exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}
