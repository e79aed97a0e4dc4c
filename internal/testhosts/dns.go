//go:build linux

package testhosts

import (
	"context"
	"errors"

	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// RecordingDNS is an authoritative DNS server on a host that answers from a
// fixed table and records the name of every query it receives, answered or not.
// Names missing from the table get NXDOMAIN.
type RecordingDNS struct {
	*Server

	answers map[string][]netip.Addr

	mu      sync.Mutex
	queries []string
}

// ServeDNS serves answers over UDP and TCP on port (0: any free port; UDP and
// TCP then share the number). Keys are names with or without the trailing dot,
// any case.
func (h *Host) ServeDNS(port int, answers map[string][]netip.Addr) (*RecordingDNS, error) {
	return h.ServeDNSAt(h.Addr, port, answers)
}

// ServeDNSAt is ServeDNS on addr, an address the host holds (its own, or one
// on a link).
func (h *Host) ServeDNSAt(addr netip.Addr, port int, answers map[string][]netip.Addr) (*RecordingDNS, error) {
	r := &RecordingDNS{answers: map[string][]netip.Addr{}}
	for name, addrs := range answers {
		r.answers[canonicalName(name)] = append([]netip.Addr(nil), addrs...)
	}
	ctx := context.Background()
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	// With port 0 the UDP port is chosen first and TCP asked for the same one;
	// retry a few times in case another process holds it.
	for try := 0; try < 8; try++ {
		pc, err = h.ListenPacketAt(ctx, addr, port)
		if err != nil {
			return nil, err
		}
		ln, err = h.ListenAt(ctx, addr, int(addrPortOf(pc.LocalAddr()).Port()))
		if err == nil {
			break
		}
		pc.Close()
		if port != 0 {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}

	mux := dns.HandlerFunc(r.serve)
	udp := &dns.Server{PacketConn: pc, Handler: mux}
	tcp := &dns.Server{Listener: ln, Handler: mux}
	var wg sync.WaitGroup
	for _, s := range []*dns.Server{udp, tcp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.ActivateAndServe()
		}()
	}
	r.Server = &Server{
		Addr: addrPortOf(pc.LocalAddr()),
		stop: func() error {
			// Shutdown fails if the server had not started yet; closing the
			// sockets ends ActivateAndServe either way.
			var errs []error
			for _, s := range []*dns.Server{udp, tcp} {
				if err := s.Shutdown(); err != nil && !strings.Contains(err.Error(), "not started") {
					errs = append(errs, err)
				}
			}
			pc.Close()
			ln.Close()
			wg.Wait()
			return errors.Join(errs...)
		},
	}
	if err := h.own(r.Server); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *RecordingDNS) serve(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	for _, qq := range q.Question {
		name := canonicalName(qq.Name)
		r.mu.Lock()
		r.queries = append(r.queries, name)
		r.mu.Unlock()
		addrs, ok := r.answers[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
			continue
		}
		for _, a := range addrs {
			hdr := dns.RR_Header{Name: qq.Name, Class: dns.ClassINET, Ttl: 5}
			switch {
			case qq.Qtype == dns.TypeA && a.Is4():
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
			case qq.Qtype == dns.TypeAAAA && a.Is6():
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
			}
		}
	}
	_ = w.WriteMsg(m)
}

// Queries returns every name asked so far, in order, lowercased and without
// the trailing dot.
func (r *RecordingDNS) Queries() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.queries...)
}

// Asked reports whether name was ever asked.
func (r *RecordingDNS) Asked(name string) bool {
	name = canonicalName(name)
	for _, q := range r.Queries() {
		if q == name {
			return true
		}
	}
	return false
}

func canonicalName(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }
