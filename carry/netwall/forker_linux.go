//go:build !postern_wallinit

package netwall

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// HoldsInitCaps says whether this process is root by uid and holds, in its
// own user namespace, every capability the init needs (initCaps). Then the run's
// namespaces need no user namespace of their own: the init is cloned into
// them without one, so the clone can be a vfork (Go forks a process whose
// child gets a user namespace in full, page tables copied and every page
// then written by this process copied once more), and the init holds no
// more than initCaps (see forker). A caller without them, root in a
// container without CAP_SYS_ADMIN included, gets a user namespace as
// before. The probe makes what it measures the same way.
func HoldsInitCaps() bool {
	// Root by uid, whose exec gives it its bounding set; or a process in a
	// user namespace of its own (see carry/netwall/ownns), whose forker passes
	// them on as ambient ones (passCapsOnExec). Capabilities held another
	// way (file capabilities, SECBIT_NOROOT) would not pass to the init as
	// forker means them to.
	if (os.Getuid() != 0 || os.Geteuid() != 0) && !inOwnUserns() {
		return false
	}
	const secbitNoroot = 1 << 0
	if bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0); err != nil || bits&secbitNoroot != 0 {
		return false
	}
	data, err := threadCaps()
	if err != nil {
		return false
	}
	for _, c := range initCaps {
		if data[c/32].Effective&(1<<(c%32)) == 0 {
			return false
		}
	}
	return true
}

// forker is the thread that clones an init with no user namespace of its
// own: its bounding set holds initCaps and nothing else, so the init,
// which as root gets its bounding set as its capabilities at its exec,
// starts with those and can never hold more. The thread is locked to its
// goroutine and lives until release, after the init has been waited for:
// the init's Pdeathsig follows its forking thread, not the process.
type forker struct {
	do   chan func()
	did  chan struct{}
	gone chan struct{}
	// ready says whether the bounding set is down (nil) or not.
	ready chan error
	once  sync.Once // of release
}

// newForker makes the thread; it fails where the bounding set cannot be
// brought down, and then no thread is left.
func newForker() (*forker, error) {
	f := &forker{do: make(chan func()), did: make(chan struct{}), gone: make(chan struct{}),
		ready: make(chan error, 1)}
	onOwnThread(f.serve)
	if err := <-f.ready; err != nil {
		return nil, err
	}
	return f, nil
}

func (f *forker) serve() {
	if err := boundToInitCaps(); err != nil {
		f.ready <- err
		return // the thread ends with what it changed
	}
	// Root's exec adds the inheritable and ambient sets to the bounding
	// set: both emptied, the init gets initCaps and nothing else.
	if err := clearInheritable(); err != nil {
		f.ready <- err
		return // the thread ends with what it changed
	}
	if err := passCapsOnExec(); err != nil {
		f.ready <- fmt.Errorf("keep the init's capabilities across its exec: %w", err)
		return // the thread ends with what it changed
	}
	f.ready <- nil
	for {
		select {
		case fn := <-f.do:
			fn()
			f.did <- struct{}{}
		case <-f.gone:
			return
		}
	}
}

// threadCaps reads the calling thread's effective, permitted and inheritable
// sets: capabilities 0-31 in the first element, 32-63 in the second.
func threadCaps() ([2]unix.CapUserData, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	err := unix.Capget(&hdr, &data[0])
	return data, err
}

// clearInheritable empties the calling thread's inheritable and ambient
// capability sets, keeping its effective and permitted ones.
func clearInheritable() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	data, err := threadCaps()
	if err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	return nil
}

// boundToInitCaps drops every capability but initCaps from the calling
// thread's bounding set, and checks that none is left.
func boundToInitCaps() error {
	last := 0
	for c := 0; ; c++ {
		keep := slices.Contains(initCaps, uintptr(c))
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("read capability %d of the bounding set: %w", c, err)
		}
		last = c
		if keep || in == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil || (in != 0) != slices.Contains(initCaps, uintptr(c)) {
			return fmt.Errorf("capability %d: in the bounding set %v, want %v (%v)", c, in != 0, slices.Contains(initCaps, uintptr(c)), err)
		}
	}
	return nil
}

// run runs fn on the thread and waits for it; it says false, having run
// nothing, once the thread is released.
func (f *forker) run(fn func()) bool {
	select {
	case f.do <- fn:
		<-f.did
		return true
	case <-f.gone:
		return false
	}
}

// release lets the thread end; once is enough, more do nothing.
func (f *forker) release() { f.once.Do(func() { close(f.gone) }) }

// StartBounded starts cmd, which has no user namespace of its own, as the
// init is started where it needs none: from a thread whose bounding set
// holds initCaps and nothing else and whose inheritable and ambient sets are
// empty, so that the child, root, holds initCaps at most. The probe measures
// the wall's namespaces this way. release must be called once cmd has been
// waited for: the child's Pdeathsig follows the thread.
func StartBounded(cmd *exec.Cmd) (release func(), err error) {
	f, err := newForker()
	if err != nil {
		return nil, fmt.Errorf("bound a thread to the init's capabilities: %w", err)
	}
	f.run(func() { err = cmd.Start() })
	if err != nil {
		f.release()
		return nil, err
	}
	return f.release, nil
}

// CheckBounded says whether the calling thread holds initCaps at most, in its
// effective, permitted, inheritable, ambient and bounding sets: what a child
// StartBounded started must find. Anything more is a defect of the thread
// that started it, and the error says so.
func CheckBounded() error {
	data, err := threadCaps()
	if err != nil {
		return fmt.Errorf("read this process's capabilities: %v", err)
	}
	for c := uintptr(0); ; c++ {
		bounding, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("read capability %d of the bounding set: %v", c, err)
		}
		if slices.Contains(initCaps, c) {
			continue
		}
		var sets []string
		if c < 64 {
			bit, d := uint32(1)<<(c%32), data[c/32]
			for _, s := range []struct {
				name string
				bits uint32
			}{{"effective", d.Effective}, {"permitted", d.Permitted}, {"inheritable", d.Inheritable}} {
				if s.bits&bit != 0 {
					sets = append(sets, s.name)
				}
			}
		}
		if ambient, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, c, 0, 0); err == nil && ambient == 1 {
			sets = append(sets, "ambient")
		}
		if bounding == 1 {
			sets = append(sets, "bounding")
		}
		if len(sets) > 0 {
			in := sets[0] + " set"
			if n := len(sets); n > 1 {
				in = strings.Join(sets[:n-1], ", ") + " and " + sets[n-1] + " sets"
			}
			return fmt.Errorf("capability %d (see capabilities(7)) is in this process's %s, where the wall's init holds only "+
				"CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_BIND_SERVICE, CAP_SETPCAP and CAP_DAC_OVERRIDE: the thread that started it "+
				"did not bound it, a defect in postern to report", c, in)
		}
	}
}
