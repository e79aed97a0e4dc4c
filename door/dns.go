package door

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// dnsTTL is the TTL of the door's answers. A fake address stays bound to its
// name for the door's life, so the TTL only bounds how long a client caches an
// answer; it is short so a client that asks again is judged again.
const dnsTTL = 5

// fakeIPs binds names to addresses from policy.FakeIPv4 and policy.FakeIPv6,
// one address per name and one name per address, for the door's life.
type fakeIPs struct {
	mu     sync.Mutex
	byName map[string][2]netip.Addr // [v4, v6], each allocated on first use
	byAddr map[netip.Addr]string
	next4  netip.Addr
	next6  netip.Addr
}

// errFakeExhausted means every fake address of a family is taken.
var errFakeExhausted = errors.New("fake address range exhausted")

func newFakeIPs() *fakeIPs {
	return &fakeIPs{
		byName: make(map[string][2]netip.Addr),
		byAddr: make(map[netip.Addr]string),
		// .0 is skipped: it reads as a network address to some stacks.
		next4: policy.FakeIPv4.Addr().Next(),
		next6: policy.FakeIPv6.Addr().Next(),
	}
}

// isFake reports whether a is in the ranges the door's DNS hands out.
func isFake(a netip.Addr) bool {
	a = a.Unmap()
	return policy.FakeIPv4.Contains(a) || policy.FakeIPv6.Contains(a)
}

// addr returns name's fake address of one family, allocating it on first use.
func (f *fakeIPs) addr(name string, v6 bool) (netip.Addr, error) {
	i := 0
	if v6 {
		i = 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	pair := f.byName[name]
	if pair[i].IsValid() {
		return pair[i], nil
	}
	next, prefix := &f.next4, policy.FakeIPv4
	if v6 {
		next, prefix = &f.next6, policy.FakeIPv6
	}
	if !next.IsValid() || !prefix.Contains(*next) || policy.GuardrailIPv4.Contains(*next) {
		return netip.Addr{}, fmt.Errorf("%w: %s", errFakeExhausted, prefix)
	}
	a := *next
	*next = a.Next()
	pair[i] = a
	f.byName[name] = pair
	f.byAddr[a] = name
	return a, nil
}

// name returns the one name a fake address was handed out for.
func (f *fakeIPs) name(a netip.Addr) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.byAddr[a.Unmap()]
	return n, ok
}

// serveDNS starts DNS servers on the non-nil sockets. The returned func stops
// them, waiting at most until its context is done.
func (d *Door) serveDNS(wg *sync.WaitGroup, pc net.PacketConn, l net.Listener, fail func(error)) func(context.Context) {
	var servers []*dns.Server
	start := func(s *dns.Server, what string) {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			if err := s.ActivateAndServe(); err != nil {
				fail(fmt.Errorf("dns %s server: %w", what, err))
			}
		})
		// Shutdown of a server that has not started is refused, so wait.
		select {
		case <-started:
		case <-done:
		}
		servers = append(servers, s)
	}
	h := dns.HandlerFunc(d.handleDNS)
	if pc != nil {
		start(&dns.Server{PacketConn: pc, Handler: h, UDPSize: 1232}, "udp")
	}
	if l != nil {
		start(&dns.Server{Listener: l, Handler: h}, "tcp")
	}
	return func(ctx context.Context) {
		for _, s := range servers {
			s.ShutdownContext(ctx)
		}
	}
}

// handleDNS answers one query from inside the wall.
func (d *Door) handleDNS(w dns.ResponseWriter, r *dns.Msg) {
	var client net.Addr
	if w != nil {
		client = w.RemoteAddr()
	}
	m := d.dnsReply(r, client)
	if m != nil && w != nil {
		w.WriteMsg(m)
	}
}

// dnsReply is the door's answer to a query. Admitted names get their fake
// address (the real name is resolved only when a connection is made); denied
// names get NXDOMAIN and are never asked of anyone; nothing is forwarded, so
// no other record type can carry data out.
func (d *Door) dnsReply(r *dns.Msg, client net.Addr) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(1232, false)
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			return m
		}
	}
	if r.Response || r.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return m
	}
	if q.Qtype == dns.TypePTR {
		d.answerPTR(m, q)
		return m
	}
	name := strings.TrimSuffix(q.Name, ".")
	h, err := policy.CanonicalHost(name)
	if err != nil || h.Name == "" {
		m.Rcode = dns.RcodeNameError
		return m
	}
	dec := d.admitName(h.Name)
	if q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA {
		j := Judgement{Host: h, Decision: dec}
		if j.Allowed() {
			a, err := d.fakes.addr(h.Name, q.Qtype == dns.TypeAAAA)
			if err != nil {
				m.Rcode = dns.RcodeServerFailure
				return m
			}
			j.Addr = a
			hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: dnsTTL}
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			} else {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
		d.emitLookup(q.Qtype, d.decisionEvent(d.connID.Add(1), event.DNS, client, j))
	} else if dec.Verdict != policy.Allow {
		// Any lookup of a denied name is recorded: it is itself a way out.
		d.emitLookup(q.Qtype, d.decisionEvent(d.connID.Add(1), event.DNS, client, Judgement{Host: h, Decision: dec}))
	}
	if dec.Verdict != policy.Allow {
		m.Rcode = dns.RcodeNameError
	}
	return m
}

// emitLookup records the decision on one lookup, at most once a second for
// the same name, query type and decision: a loop of lookups is a handful of
// events carrying the count, not one event per packet.
func (d *Door) emitLookup(qtype uint16, ev Event) {
	k := repeatKey{kind: ev.Kind, host: ev.Host, what: dns.TypeToString[qtype], decision: ev.Decision, wouldDeny: ev.WouldDeny}
	for _, e := range d.repeats.admit(k, ev, time.Now()) {
		d.emit(e)
	}
}

// admitName decides whether the DNS side hands out a fake address for name:
// yes if the policy admits it on any of its ports.
func (d *Door) admitName(name string) policy.Decision {
	if d.cfg.Upstream != nil {
		// The upstream judges, by name: every name gets its fake address
		// and is sent on unresolved.
		return policy.Decision{Verdict: policy.Allow, Reason: d.cfg.Upstream.reason()}
	}
	pol := d.policy()
	ports := pol.Ports
	if len(ports) == 0 {
		ports = []uint16{443, 80}
	}
	var first policy.Decision
	for i, p := range ports {
		dec := pol.DecideName(name, p)
		if dec.Verdict == policy.Allow && !dec.WouldDeny {
			return dec
		}
		if i == 0 {
			first = dec
		}
	}
	for _, p := range ports {
		// Observe mode: admitted, but enforce would deny on every port.
		if dec := pol.DecideName(name, p); dec.Verdict == policy.Allow {
			return dec
		}
	}
	return first
}

// answerPTR names a fake address; any other reverse lookup is NXDOMAIN.
func (d *Door) answerPTR(m *dns.Msg, q dns.Question) {
	a, ok := reverseAddr(q.Name)
	if ok {
		if name, ok := d.fakes.name(a); ok {
			m.Answer = append(m.Answer, &dns.PTR{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: dnsTTL},
				Ptr: dns.Fqdn(name),
			})
			return
		}
	}
	m.Rcode = dns.RcodeNameError
}

// reverseAddr reads an in-addr.arpa or ip6.arpa name.
func reverseAddr(name string) (netip.Addr, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 4 {
			return netip.Addr{}, false
		}
		for i, j := 0, 3; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		a, err := netip.ParseAddr(strings.Join(parts, "."))
		return a, err == nil && a.Is4()
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		nibbles := strings.Split(rest, ".")
		if len(nibbles) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, n := range nibbles {
			if len(n) != 1 {
				return netip.Addr{}, false
			}
			v := strings.IndexByte("0123456789abcdef", n[0])
			if v < 0 {
				return netip.Addr{}, false
			}
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= byte(v) << 4
			} else {
				b[pos/2] |= byte(v)
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}
