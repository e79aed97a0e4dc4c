package netwall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// HooksHolder is where a network namespace is kept that holds the netfilter
// hooks a wall's table registers, so that a run's wall does not patch the
// kernel's code.
//
// Whether the kernel runs a netfilter hook at all is a static key, one per
// protocol family and hook point, shared by every network namespace. When a
// wall's table is the only one on the machine with a hook there (a machine
// with no firewall rules of its own), its commit turns those keys on and the
// namespace's end turns them off again, and each turn rewrites the kernel's
// code on every CPU (text_poke, with an IPI to each): 1.1 ms of the init's
// commit measured, on the run's chain, and as much again at its end, in the
// kernel's workers. A namespace that keeps the same table holds the keys on,
// and each wall's commit then only counts them. Nothing reaches the held
// namespace: it has only lo, down, and no process. The host's own packets
// take the hook path, empty for its own namespace, as on any machine with
// firewall rules.
//
// It lives under /run, so a boot clears it; only root can keep one (a bind
// mount of the namespace).
var HooksHolder = "/run/postern/netfilter-hooks"

// HooksHeld says whether HooksHolder holds a network namespace.
func HooksHeld() bool { return hooksHeldAt(HooksHolder) }

func hooksHeldAt(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// HoldHooks makes HooksHolder hold a network namespace with the wall's table
// in it, unless it does already. It is for root only (ErrNotRoot otherwise);
// whoever fails to make one loses only the time it saves.
func HoldHooks() error { return holdHooksAt(HooksHolder) }

// ErrNotRoot says only root can keep the hooks' namespace.
var ErrNotRoot = errors.New("only root can keep a network namespace")

func holdHooksAt(path string) error {
	if hooksHeldAt(path) {
		return nil
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hold the netfilter hooks: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("hold the netfilter hooks: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("hold the netfilter hooks: lock %s: %w", lock.Name(), err)
	}
	if hooksHeldAt(path) {
		return nil // another postern made it meanwhile
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return fmt.Errorf("hold the netfilter hooks: %w", err)
	}
	f.Close()
	done := make(chan error, 1)
	onOwnThread(func() { done <- keepHooks(path) })
	if err := <-done; err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return fmt.Errorf("hold the netfilter hooks: %w", err)
	}
	return nil
}

// keepHooks moves the calling thread, which must be locked to it and end with
// it, into a new network namespace, binds that namespace at path and applies
// the wall's table there.
func keepHooks(path string) error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("new network namespace: %w", err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the namespace at %s: %w", path, err)
	}
	// The wall's own table, so that every hook a wall registers is held:
	// the nat and filter chains at output, and the redirect's conntrack
	// and NAT in both families.
	return applyRules(RuleConfig{Ports: []uint16{80, 443}, TransparentPort: 1, DNSPort: 1})
}

// ReleaseHooks unmounts and removes HooksHolder; the namespace goes with its
// last mount. It says whether there was one.
func ReleaseHooks() (bool, error) { return releaseHooksAt(HooksHolder) }

func releaseHooksAt(path string) (bool, error) {
	if !hooksHeldAt(path) {
		return false, nil
	}
	// Not while another postern is making or releasing it.
	if lock, err := os.OpenFile(path+".lock", os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		defer lock.Close()
		_ = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if !hooksHeldAt(path) {
			return false, nil
		}
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		return true, fmt.Errorf("release the netfilter hooks: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("release the netfilter hooks: %w", err)
	}
	return true, nil
}
