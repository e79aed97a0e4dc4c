//go:build linux

package testhosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Host is one throwaway machine: a named network namespace with lo and one
// interface, eth0, whose only peer is the root namespace. It has no default
// route, so nothing inside can reach anything but the root namespace's end of
// its own /24.
type Host struct {
	Name    string       // as given to Lab.Host
	NetNS   string       // the named namespace (ip netns exec NetNS …)
	Link    string       // the root-namespace end of the veth pair
	Addr    netip.Addr   // the host's address (10.x.i.2)
	Gateway netip.Addr   // the root namespace's address on the link (10.x.i.1)
	Prefix  netip.Prefix // the link's /24

	lab *Lab
	ns  netns.NsHandle

	mu      sync.Mutex
	closers []io.Closer
	closed  bool
}

func newHost(l *Lab, idx int, name string) (h *Host, err error) {
	base := slotPrefix(l.slot).Addr().As4()
	base[2] = byte(idx)
	prefix := netip.PrefixFrom(netip.AddrFrom4(base), 24)
	gw, addr := base, base
	gw[3], addr[3] = 1, 2
	h = &Host{
		Name:    name,
		NetNS:   nsPrefix(l.slot) + l.prefix + "-" + name,
		Link:    linkPrefix(l.slot) + strconv.Itoa(idx),
		Addr:    netip.AddrFrom4(addr),
		Gateway: netip.AddrFrom4(gw),
		Prefix:  prefix,
		lab:     l,
		ns:      netns.None(),
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("make host %s: %w", name, err), h.close())
		}
	}()

	if err := prepareNetnsDir(); err != nil {
		return h, err
	}
	if err := onFreshThread(func() error {
		ns, err := netns.NewNamed(h.NetNS)
		if err != nil {
			return fmt.Errorf("create netns %s: %w", h.NetNS, err)
		}
		h.ns = ns
		return nil
	}); err != nil {
		return h, err
	}

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: h.Link},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(h.ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return h, fmt.Errorf("add veth %s: %w", h.Link, err)
	}
	root, err := netlink.LinkByName(h.Link)
	if err != nil {
		return h, fmt.Errorf("find %s: %w", h.Link, err)
	}
	if err := netlink.AddrAdd(root, nlAddr(h.Gateway, 24)); err != nil {
		return h, fmt.Errorf("address %s on %s: %w", h.Gateway, h.Link, err)
	}
	if err := netlink.LinkSetUp(root); err != nil {
		return h, fmt.Errorf("up %s: %w", h.Link, err)
	}

	nh, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		return h, fmt.Errorf("netlink in %s: %w", h.NetNS, err)
	}
	defer nh.Close()
	for _, dev := range []string{"lo", "eth0"} {
		ln, err := nh.LinkByName(dev)
		if err != nil {
			return h, fmt.Errorf("find %s in %s: %w", dev, h.NetNS, err)
		}
		if dev == "eth0" {
			if err := nh.AddrAdd(ln, nlAddr(h.Addr, 24)); err != nil {
				return h, fmt.Errorf("address %s in %s: %w", h.Addr, h.NetNS, err)
			}
		}
		if err := nh.LinkSetUp(ln); err != nil {
			return h, fmt.Errorf("up %s in %s: %w", dev, h.NetNS, err)
		}
	}
	return h, nil
}

func nlAddr(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}}
}

// onFreshThread runs fn on an OS thread that is thrown away afterwards, so a
// namespace switch made by fn can never leak to other goroutines: the goroutine
// keeps its thread locked and exits, and the runtime then ends the thread.
func onFreshThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		errc <- fn()
	}()
	return <-errc
}

// InNS runs fn on a thread of its own inside the host's network namespace,
// thrown away after. Sockets fn opens belong to the host's network for their
// whole life.
func (h *Host) InNS(fn func() error) error { return h.inNS(fn) }

// inNS runs fn with the calling thread inside the host's namespace. Sockets fn
// opens belong to the host's network for their whole life.
func (h *Host) inNS(fn func() error) error {
	return onFreshThread(func() error {
		if err := netns.Set(h.ns); err != nil {
			return fmt.Errorf("enter netns %s: %w", h.NetNS, err)
		}
		return fn()
	})
}

// Listen opens a TCP listener on the host's address. port 0 picks a free one.
func (h *Host) Listen(ctx context.Context, port int) (net.Listener, error) {
	return h.ListenAt(ctx, h.Addr, port)
}

// ListenAt opens a TCP listener on addr, an address the host holds (its own,
// or one on a link).
func (h *Host) ListenAt(ctx context.Context, addr netip.Addr, port int) (net.Listener, error) {
	var ln net.Listener
	err := h.inNS(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp4", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s at %s port %d: %w", h.Name, addr, port, err)
	}
	return ln, nil
}

// ListenPacket opens a UDP socket on the host's address.
func (h *Host) ListenPacket(ctx context.Context, port int) (net.PacketConn, error) {
	return h.ListenPacketAt(ctx, h.Addr, port)
}

// ListenPacketAt opens a UDP socket on addr, an address the host holds.
func (h *Host) ListenPacketAt(ctx context.Context, addr netip.Addr, port int) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.inNS(func() error {
		var err error
		pc, err = (&net.ListenConfig{}).ListenPacket(ctx, "udp4", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen udp on %s at %s port %d: %w", h.Name, addr, port, err)
	}
	return pc, nil
}

// Dial opens a TCP connection from inside the host, as a client on that host
// would.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.inNS(func() error {
		var err error
		// The dial's socket is made on this thread; the connect may finish on
		// another, which does not matter: the socket's namespace is fixed.
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, h.Name, err)
	}
	return c, nil
}

// Command returns a command that runs inside the host's namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NetNS, name}, args...)...)
}

// own registers c to be closed when the host is.
func (h *Host) own(c io.Closer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		c.Close()
		return ErrClosed
	}
	h.closers = append(h.closers, c)
	return nil
}

func (h *Host) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	closers := h.closers
	h.mu.Unlock()

	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i].Close())
	}
	if ln, err := netlink.LinkByName(h.Link); err == nil {
		if err := netlink.LinkDel(ln); err != nil {
			errs = append(errs, fmt.Errorf("delete link %s: %w", h.Link, err))
		}
	}
	if h.ns.IsOpen() {
		errs = append(errs, h.ns.Close())
	}
	errs = append(errs, deleteNamedNS(h.NetNS))
	return errors.Join(errs...)
}
