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

// holders names the other processes that hold a lock on path, from /proc: a
// lock stays held while any process keeps the descriptor it was taken on (a
// child that inherited one keeps it after the process that locked has ended),
// and such a descriptor's fdinfo lists the lock. Processes that merely have
// the file open (others waiting their turn) are named only when no holder can
// be seen.
func holders(path string) []string {
	target, err := os.Stat(path)
	if err != nil {
		return nil
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	self := os.Getpid()
	var locking, opening []string
	seen := map[int]bool{}
	for _, fd := range fds {
		parts := strings.Split(fd, "/")
		pid, err := strconv.Atoi(parts[2])
		if err != nil || pid == self || seen[pid] {
			continue
		}
		st, err := os.Stat(fd)
		if err != nil || !os.SameFile(st, target) {
			continue
		}
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		who := fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(name)))
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, parts[4]))
		if strings.Contains(string(info), "\nlock:") {
			seen[pid] = true
			locking = append(locking, who)
		} else if len(opening) < maxHolders {
			opening = append(opening, who)
		}
		if len(locking) == maxHolders {
			break
		}
	}
	if len(locking) > 0 {
		return locking
	}
	return opening
}
