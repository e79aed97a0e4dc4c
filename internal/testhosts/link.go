//go:build linux

package testhosts

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// HostLink is a veth pair joining two hosts directly, in a /24 of its own. Each
// host reaches the other at its link address; the root namespace has no route
// there, so a server listening on B's link address is reachable only from A.
type HostLink struct {
	A, B         *Host
	AddrA, AddrB netip.Addr
	Prefix       netip.Prefix
}

var (
	linkMu    sync.Mutex
	linkCount = map[*Lab]int{}
)

// Link joins a and b. Links take /24s from the top of the lab's /16 down, so
// they never meet the hosts' own /24s. The link goes when either host does.
func (l *Lab) Link(ctx context.Context, a, b *Host) (*HostLink, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	hosts, closed := len(l.hosts), l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	linkMu.Lock()
	k := linkCount[l]
	linkCount[l] = k + 1
	linkMu.Unlock()
	octet := 254 - k
	if octet <= hosts {
		return nil, fmt.Errorf("link %s-%s: the lab has no /24 left for links", a.Name, b.Name)
	}
	base := slotPrefix(l.slot).Addr().As4()
	base[2] = byte(octet)
	hl := &HostLink{A: a, B: b, Prefix: netip.PrefixFrom(netip.AddrFrom4(base), 24)}
	ea, eb := base, base
	ea[3], eb[3] = 1, 2
	hl.AddrA, hl.AddrB = netip.AddrFrom4(ea), netip.AddrFrom4(eb)
	nameA, nameB := fmt.Sprintf("lnk%d", k), fmt.Sprintf("lnk%d", k)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: nameA, Namespace: netlink.NsFd(int(a.ns))},
		PeerName:      nameB,
		PeerNamespace: netlink.NsFd(int(b.ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("link %s-%s: add veth: %w", a.Name, b.Name, err)
	}
	for _, side := range []struct {
		h    *Host
		name string
		addr netip.Addr
	}{{a, nameA, hl.AddrA}, {b, nameB, hl.AddrB}} {
		nh, err := netlink.NewHandleAt(side.h.ns)
		if err != nil {
			return nil, fmt.Errorf("link %s-%s: netlink in %s: %w", a.Name, b.Name, side.h.NetNS, err)
		}
		ln, err := nh.LinkByName(side.name)
		if err == nil {
			err = nh.AddrAdd(ln, nlAddr(side.addr, 24))
		}
		if err == nil {
			err = nh.LinkSetUp(ln)
		}
		nh.Close()
		if err != nil {
			return nil, fmt.Errorf("link %s-%s: set up %s in %s: %w", a.Name, b.Name, side.name, side.h.NetNS, err)
		}
	}
	return hl, nil
}

// ServeHTTPAt serves handler (nil: EchoHandler) over plain HTTP on addr:port
// inside h, for an address h holds on a link.
func (h *Host) ServeHTTPAt(addr netip.Addr, port int, handler http.Handler) (*Server, error) {
	if handler == nil {
		handler = EchoHandler(h.Name)
	}
	var ln net.Listener
	err := h.inNS(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s at %s port %d: %w", h.Name, addr, port, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s := &Server{Addr: addrPortOf(ln.Addr()), stop: func() error {
		err := srv.Close()
		<-done
		return err
	}}
	s.URL = "http://" + s.Addr.String() + "/"
	if err := h.own(s); err != nil {
		return nil, err
	}
	return s, nil
}
