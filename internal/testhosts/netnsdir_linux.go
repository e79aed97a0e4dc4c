//go:build linux

package testhosts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

var netnsDirOnce struct {
	sync.Mutex
	done bool
}

// prepareNetnsDir makes /run/netns a shared mount point of its own before any
// named namespace is bound under it, as iproute2 does. Without it, the first
// other tool that does so (ip netns, podman's netavark) binds the directory
// over itself and hides the mounts already there: they can then be neither
// unmounted (EINVAL) nor removed (EBUSY) from this mount namespace. The
// directory is made a mount point at most once per process; a lock file
// keeps two processes from stacking binds.
func prepareNetnsDir() error {
	netnsDirOnce.Lock()
	defer netnsDirOnce.Unlock()
	if netnsDirOnce.done {
		return nil
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", netnsDir, err)
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(StateDir, "netns-dir.lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	// make-shared succeeds only on a mount point.
	err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s over itself: %w", netnsDir, err)
		}
		err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount: %w", netnsDir, err)
	}
	netnsDirOnce.done = true
	return nil
}
