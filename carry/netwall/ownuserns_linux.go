//go:build !postern_wallinit

package netwall

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// inOwnUserns says whether this process is in a user namespace that maps its
// own uid and nothing else (as ownns makes, or `unshare --map-current-user`):
// one that owns nothing of the host's. What it holds there decides the rest
// (HoldsInitCaps): postern launched by ownns holds initCaps, and sets the
// run's wall up itself.
var inOwnUserns = sync.OnceValue(func() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	uid := os.Getuid()
	if err != nil || uid == 0 {
		return false
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 1 {
		return false
	}
	inside, outside, count, ok := idMapLine(lines[0])
	return ok && inside == uid && outside == uid && count == 1
})

// passCapsOnExec has what the calling thread execs keep initCaps, where this
// process is not root in its user namespace (see inOwnUserns): the exec of a
// uid other than 0 gives a program no capabilities but its ambient ones. The
// thread's inheritable and ambient sets then hold initCaps, and its bounding
// set (see boundToInitCaps) holds no more. Root's exec gives the bounding
// set, and needs nothing here.
func passCapsOnExec() error {
	if os.Geteuid() == 0 {
		return nil
	}
	data, err := threadCaps()
	if err != nil {
		return err
	}
	for _, c := range initCaps {
		data[c/32].Inheritable |= 1 << (c % 32)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	for _, c := range initCaps {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c, 0, 0); err != nil {
			return err
		}
	}
	return nil
}
