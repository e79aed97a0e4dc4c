package netwall

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// devNodes are the host's device nodes a run may open: nothing that reaches
// hardware, a console or another terminal. /dev/ptmx is not among them: in
// the run's /dev it is a link into the run's own devpts (see ownTerminals).
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the links every /dev has.
var devLinks = [][2]string{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},
}

// ownDev gives the run a /dev of its own: a tmpfs holding only devNodes, each
// bound from the host's, the links of devLinks and empty pts and shm for the
// run's devpts and tmpfs. Every other host device node (disks, consoles,
// loop and kvm devices, the host's terminals), and whatever else the host's
// /dev holds (its log socket, mqueue and hugepages mounts), is not there.
// The tmpfs is made read-only once filled, as the host's /dev is: the run
// cannot add a file to it, and a node it could make would not open (a
// filesystem mounted in a user namespace ignores device nodes).
//
// One tmpfs and six binds replace a mask over each other node of the host's
// /dev (99 mounts on a small virtual machine, more on a large host).
func ownDev() error {
	st, err := os.Stat("/dev")
	if err != nil || !st.IsDir() {
		return nil // no /dev to replace: nothing of the host's to reach there
	}
	// Hold the host's nodes before the tmpfs covers them.
	held := make([]int, len(devNodes))
	for i, n := range devNodes {
		held[i] = -1
		fd, err := unix.Open("/dev/"+n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // the host has no such node: neither has the run
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			unix.Close(fd)
			continue // not a character device: not what the name promises
		}
		held[i] = fd
	}
	defer func() {
		for _, fd := range held {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount a tmpfs on /dev: %w", err)
	}
	for i, n := range devNodes {
		if held[i] < 0 {
			continue
		}
		p := filepath.Join("/dev", n)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("make %s: %w", p, err)
		}
		f.Close()
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(held[i]), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the host's %s: %w", p, err)
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[1], filepath.Join("/dev", l[0])); err != nil {
			return fmt.Errorf("link /dev/%s: %w", l[0], err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join("/dev", d), 0o755); err != nil {
			return fmt.Errorf("make /dev/%s: %w", d, err)
		}
	}
	return readOnly("/dev")
}
