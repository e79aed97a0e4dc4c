package records

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxHolders bounds how many holders an error names.
const maxHolders = 4

// holders names the other processes that have path open, from /proc: a lock
// stays held while any of them keeps its descriptor (a child that inherited
// one keeps it after the process that locked has ended).
func holders(path string) []string {
	target, err := os.Stat(path)
	if err != nil {
		return nil
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	self := os.Getpid()
	var out []string
	seen := map[int]bool{}
	for _, fd := range fds {
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err != nil || pid == self || seen[pid] {
			continue
		}
		st, err := os.Stat(fd)
		if err != nil || !os.SameFile(st, target) {
			continue
		}
		seen[pid] = true
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(name))))
		if len(out) == maxHolders {
			break
		}
	}
	return out
}
