//go:build linux

package testhosts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Address plan. A lab claims one slot; slot s owns 10.(firstOctet2+s).0.0/16 and
// host i of the lab owns 10.(firstOctet2+s).i.0/24, with the root namespace at .1
// and the host at .2. A slot is claimed by holding an exclusive flock on
// StateDir/slot-<s>.lock, so concurrent test processes never share a subnet and
// a slot whose owner died (the kernel drops the lock with the process) can be
// swept and reused. Every object a slot makes is named after the slot:
// network namespaces "pt<s>-<prefix>-<host>", root-side veth ends "pt<s>h<i>".
const (
	firstOctet2 = 160
	maxSlots    = 64
	maxHosts    = 254
	// StateDir holds the slot lock files.
	StateDir = "/run/postern-testhosts"
	netnsDir = "/run/netns"
)

// ErrNoSlot means every lab slot is held by a live process or overlaps a
// network this machine already routes.
var ErrNoSlot = errors.New("no free test-host slot")

// ErrClosed is returned by a Lab or Host used after Close.
var ErrClosed = errors.New("test lab closed")

// Lab is a set of throwaway hosts sharing one /16. It must be closed.
type Lab struct {
	prefix string
	slot   int
	lock   *os.File
	dir    string
	ca     *authority

	mu     sync.Mutex
	hosts  []*Host
	names  map[string]bool
	closed bool
}

// NewLab claims a free slot and returns an empty lab. prefix (letters and
// digits, up to 12) names the lab's namespaces so a person can tell whose they
// are. It needs root.
func NewLab(ctx context.Context, prefix string) (*Lab, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validLabel(prefix, 12) {
		return nil, fmt.Errorf("lab prefix %q: use 1 to 12 letters, digits or '-'", prefix)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("new lab: %w", ErrNeedsRoot)
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("new lab: %w", err)
	}
	used, err := routedPrefixes()
	if err != nil {
		return nil, fmt.Errorf("new lab: %w", err)
	}
	for s := 0; s < maxSlots; s++ {
		subnet := slotPrefix(s)
		if overlapsAny(subnet, used) {
			continue
		}
		f, ok, err := tryLock(s)
		if err != nil {
			return nil, fmt.Errorf("new lab: %w", err)
		}
		if !ok {
			continue
		}
		// The slot's last owner is gone; whatever it left behind is ours to remove.
		if err := cleanSlot(s); err != nil {
			f.Close()
			return nil, fmt.Errorf("new lab: clean stale slot %d: %w", s, err)
		}
		// cleanSlot removed this slot's links, so a route seen now is someone else's.
		if used, err = routedPrefixes(); err == nil && overlapsAny(subnet, used) {
			f.Close()
			continue
		}
		dir, err := os.MkdirTemp("", "postern-lab-")
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("new lab: %w", err)
		}
		ca, err := newAuthority(dir)
		if err != nil {
			f.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("new lab: %w", err)
		}
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		return &Lab{prefix: prefix, slot: s, lock: f, dir: dir, ca: ca, names: map[string]bool{}}, nil
	}
	return nil, fmt.Errorf("new lab: %w: all %d slots under %s are held by live processes or overlap routed networks (run testhosts.Sweep or remove stale namespaces with 'ip netns list')", ErrNoSlot, maxSlots, StateDir)
}

// Subnet is the /16 every host of the lab lives in. Policies that must reach the
// lab's hosts by name list it (or a host's Prefix) in allow_cidrs.
func (l *Lab) Subnet() netip.Prefix { return slotPrefix(l.slot) }

// CAFile is the PEM file of the certificate authority that signs every HTTPS
// server of the lab (curl --cacert).
func (l *Lab) CAFile() string { return l.ca.file }

// Dir is a private temporary directory removed on Close.
func (l *Lab) Dir() string { return l.dir }

// Host makes a new host named name (letters, digits and '-', up to 24).
func (l *Lab) Host(ctx context.Context, name string) (*Host, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validLabel(name, 24) {
		return nil, fmt.Errorf("host name %q: use 1 to 24 letters, digits or '-'", name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if l.names[name] {
		return nil, fmt.Errorf("host %q already exists in this lab", name)
	}
	idx := len(l.hosts) + 1
	if idx > maxHosts {
		return nil, fmt.Errorf("lab holds at most %d hosts", maxHosts)
	}
	h, err := newHost(l, idx, name)
	if err != nil {
		return nil, err
	}
	l.hosts = append(l.hosts, h)
	l.names[name] = true
	return h, nil
}

// Close stops every server, removes every namespace and link the lab made, and
// releases its slot. It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	hosts := l.hosts
	l.mu.Unlock()

	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.close())
	}
	// Anything a half-made host left behind.
	errs = append(errs, cleanSlot(l.slot))
	errs = append(errs, os.RemoveAll(l.dir))
	errs = append(errs, l.lock.Close())
	return errors.Join(errs...)
}

// Sweep removes the namespaces and links of every slot whose owning process is
// gone. Slots held by live processes are left alone.
func Sweep() error {
	var errs []error
	for s := 0; s < maxSlots; s++ {
		if _, err := os.Stat(lockPath(s)); err != nil {
			continue
		}
		f, ok, err := tryLock(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		errs = append(errs, cleanSlot(s))
		f.Close()
	}
	return errors.Join(errs...)
}

func slotPrefix(s int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(firstOctet2 + s), 0, 0}), 16)
}

func lockPath(s int) string { return filepath.Join(StateDir, fmt.Sprintf("slot-%d.lock", s)) }

func nsPrefix(s int) string   { return fmt.Sprintf("pt%d-", s) }
func linkPrefix(s int) string { return fmt.Sprintf("pt%dh", s) }

// tryLock takes slot s's lock without waiting. Lock files are never removed, so
// two processes can never hold locks on different files for the same slot.
func tryLock(s int) (*os.File, bool, error) {
	f, err := os.OpenFile(lockPath(s), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("open slot lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", lockPath(s), err)
	}
	return f, true, nil
}

// cleanSlot removes every link and named namespace of slot s. The caller holds
// the slot's lock.
func cleanSlot(s int) error {
	var errs []error
	links, err := wholeDump(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, ln := range links {
		if strings.HasPrefix(ln.Attrs().Name, linkPrefix(s)) {
			if err := netlink.LinkDel(ln); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("delete link %s: %w", ln.Attrs().Name, err))
			}
		}
	}
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix(s)) {
			if err := deleteNamedNS(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func deleteNamedNS(name string) error {
	err := netns.DeleteNamed(name)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// A file that is not (or no longer) a mount point: remove it anyway.
	if errors.Is(err, unix.EINVAL) {
		if rerr := os.Remove(filepath.Join(netnsDir, name)); rerr == nil || errors.Is(rerr, os.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("delete netns %s: %w", name, err)
}

// wholeDump calls list until the kernel's dump was not interrupted. Other
// tests (other packages, in parallel) add and remove links and routes all the
// time, and a dump that a change interrupts is answered in part, with
// netlink.ErrDumpInterrupted: a cleanup going by it would miss links.
func wholeDump[T any](list func() ([]T, error)) ([]T, error) {
	for try := 0; ; try++ {
		out, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || try == 50 {
			return out, err
		}
		time.Sleep(time.Millisecond)
	}
}

// routedPrefixes lists the IPv4 networks the root namespace routes or holds
// addresses in, so a lab never shadows a real network.
func routedPrefixes() ([]netip.Prefix, error) {
	routes, err := wholeDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			continue // default route: says nothing about 10.x
		}
		ones, _ := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if !ok || ones == 0 {
			continue
		}
		out = append(out, netip.PrefixFrom(a, ones).Masked())
	}
	return out, nil
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if p.Overlaps(q) {
			// Host routes to loopback-local addresses in table local still count.
			return true
		}
	}
	return false
}

func validLabel(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
