package door

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/postern-dev/postern/door/policy"
)

func ask(t testing.TB, network, server, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("ask %s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func TestDNSSide(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy))
	h.lookupResult("a.test", "11.0.0.1") // must never be asked at DNS time

	r := ask(t, "udp", h.dnsUDP, "a.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("A a.test: %v", r)
	}
	a1, _ := netip.AddrFromSlice(r.Answer[0].(*dns.A).A)
	if !policy.FakeIPv4.Contains(a1) || r.Answer[0].Header().Ttl != dnsTTL {
		t.Fatalf("A a.test = %v (ttl %d), want an address in %s", a1, r.Answer[0].Header().Ttl, policy.FakeIPv4)
	}
	// Stable, over UDP and TCP, and in any spelling of the name.
	for _, q := range []struct{ net, name string }{{"udp", "a.test"}, {"tcp", "A.TEST."}} {
		srv := h.dnsUDP
		if q.net == "tcp" {
			srv = h.dnsTCP
		}
		r := ask(t, q.net, srv, q.name, dns.TypeA)
		if a, _ := netip.AddrFromSlice(r.Answer[0].(*dns.A).A); a != a1 {
			t.Fatalf("A %s over %s = %v, want the same fake address %v", q.name, q.net, a, a1)
		}
	}
	rb := ask(t, "udp", h.dnsUDP, "www.b.test", dns.TypeA)
	b1, _ := netip.AddrFromSlice(rb.Answer[0].(*dns.A).A)
	if b1 == a1 || !policy.FakeIPv4.Contains(b1) {
		t.Fatalf("two names share %v", b1)
	}
	r6 := ask(t, "udp", h.dnsUDP, "a.test", dns.TypeAAAA)
	a6, _ := netip.AddrFromSlice(r6.Answer[0].(*dns.AAAA).AAAA)
	if !policy.FakeIPv6.Contains(a6) {
		t.Fatalf("AAAA a.test = %v", a6)
	}
	if n, ok := h.d.fakes.name(a1); !ok || n != "a.test" {
		t.Fatalf("fake %v maps to %q", a1, n)
	}
	if n, _ := h.d.fakes.name(a6); n != "a.test" {
		t.Fatalf("fake %v maps to %q", a6, n)
	}

	// Denied and unlisted names: NXDOMAIN and a deny event.
	for _, name := range []string{"bad.a.test", "exfil-0123abcd.other.test"} {
		r := ask(t, "udp", h.dnsUDP, name, dns.TypeA)
		if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Fatalf("A %s: %v", name, r)
		}
		h.ev.waitFor(t, "dns deny "+name, func(e Event) bool { return e.Kind == "dns" && e.Host == name && e.Decision == "deny" })
	}
	// A TXT question for a denied name is refused and recorded too.
	if r := ask(t, "udp", h.dnsUDP, "secret.other.test", dns.TypeTXT); r.Rcode != dns.RcodeNameError {
		t.Fatalf("TXT denied: %v", r)
	}
	h.ev.waitFor(t, "dns deny txt", func(e Event) bool { return e.Kind == "dns" && e.Host == "secret.other.test" })
	// Other types for an admitted name: NOERROR, nothing (no tunnel over TXT/MX).
	for _, qt := range []uint16{dns.TypeTXT, dns.TypeMX, dns.TypeCNAME, dns.TypeHTTPS} {
		r := ask(t, "udp", h.dnsUDP, "a.test", qt)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Fatalf("%s a.test: %v", dns.TypeToString[qt], r)
		}
	}
	// PTR of a fake address names it; any other reverse lookup is NXDOMAIN.
	rev, _ := dns.ReverseAddr(a1.String())
	if r := ask(t, "udp", h.dnsUDP, rev, dns.TypePTR); len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "a.test." {
		t.Fatalf("PTR %s: %v", rev, r)
	}
	rev6, _ := dns.ReverseAddr(a6.String())
	if r := ask(t, "udp", h.dnsUDP, rev6, dns.TypePTR); len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "a.test." {
		t.Fatalf("PTR %s: %v", rev6, r)
	}
	if r := ask(t, "udp", h.dnsUDP, "1.0.0.10.in-addr.arpa", dns.TypePTR); r.Rcode != dns.RcodeNameError {
		t.Fatalf("PTR of a real address: %v", r)
	}
	// Sane server behaviour: CHAOS class refused, EDNS answered with EDNS.
	m := new(dns.Msg)
	m.SetQuestion("version.bind.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, h.dnsUDP); err != nil || r.Rcode != dns.RcodeRefused {
		t.Fatalf("CHAOS: %v %v", r, err)
	}
	m = new(dns.Msg)
	m.SetQuestion("a.test.", dns.TypeA)
	m.SetEdns0(4096, true)
	if r, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, h.dnsUDP); err != nil || r.IsEdns0() == nil || len(r.Answer) != 1 {
		t.Fatalf("EDNS: %v %v", r, err)
	}
	if l := h.looked(); len(l) != 0 {
		t.Fatalf("the DNS side resolved names: %v", l)
	}
}

func TestDNSWithDig(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatal("dig is required for this test")
	}
	h := newHarness(t, mustPolicy(t, testPolicy))
	host, port, _ := net.SplitHostPort(h.dnsUDP)
	out, err := exec.Command("dig", "+time=2", "+tries=1", "@"+host, "-p", port, "a.test", "A", "+short").CombinedOutput()
	if err != nil {
		t.Fatalf("dig: %v\n%s", err, out)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(out)))
	if err != nil || !policy.FakeIPv4.Contains(a) {
		t.Fatalf("dig a.test: %q", out)
	}
	out, _ = exec.Command("dig", "+time=2", "+tries=1", "@"+host, "-p", port, "nope.other.test", "A").CombinedOutput()
	if !strings.Contains(string(out), "status: NXDOMAIN") {
		t.Fatalf("dig denied name:\n%s", out)
	}
}

func TestDNSObserveMode(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `mode = "observe"
ports = [443]
allow = ["a.test"]
deny = ["bad.test"]
`))
	r := ask(t, "udp", h.dnsUDP, "bad.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("observe mode must answer: %v", r)
	}
	ev := h.ev.waitFor(t, "would deny", func(e Event) bool { return e.Kind == "dns" && e.Host == "bad.test" })
	if !ev.WouldDeny || ev.Decision != "allow" || ev.Mode != "observe" {
		t.Fatalf("observe event %+v", ev)
	}
	r = ask(t, "udp", h.dnsUDP, "a.test", dns.TypeA)
	ev = h.ev.waitFor(t, "allow", func(e Event) bool { return e.Kind == "dns" && e.Host == "a.test" })
	if ev.WouldDeny || len(r.Answer) != 1 {
		t.Fatalf("allowed name in observe mode: %+v %v", ev, r)
	}
}

// recordingDNS is a real DNS server on loopback that records every question
// and answers A queries from a table.
type recordingDNS struct {
	mu   sync.Mutex
	seen []string
	addr string
}

func startRecordingDNS(t testing.TB, answers map[string]string) *recordingDNS {
	t.Helper()
	r := &recordingDNS{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(q.Question[0].Name, ".")
		r.mu.Lock()
		r.seen = append(r.seen, name+"/"+dns.TypeToString[q.Question[0].Qtype])
		r.mu.Unlock()
		if a, ok := answers[name]; ok {
			if q.Question[0].Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + a)
				m.Answer = append(m.Answer, rr)
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return r
}

func (r *recordingDNS) questions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func TestResolverNeverAskedDeniedNames(t *testing.T) {
	up := startRecordingDNS(t, map[string]string{"a.test": "11.0.0.9", "bad.a.test": "11.0.0.10", "rebind.a.test": "10.1.1.1"})
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) { c.Resolver = up.addr })
	h.route("11.0.0.9", httpServer(t, "A", nil))
	ctx := context.Background()

	if j := h.d.Decide(ctx, hostOf(t, "bad.a.test"), 443); j.Allowed() {
		t.Fatalf("bad.a.test allowed")
	}
	if j := h.d.Decide(ctx, hostOf(t, "x.other.test"), 443); j.Allowed() {
		t.Fatalf("x.other.test allowed")
	}
	// Through the proxy too: a denied CONNECT is never resolved.
	connectVia(t, h.proxy, "bad.a.test:443")
	if q := up.questions(); len(q) != 0 {
		t.Fatalf("denied names reached the resolver: %v", q)
	}
	j := h.d.Decide(ctx, hostOf(t, "a.test"), 443)
	if !j.Allowed() || len(j.Addrs) != 1 || j.Addrs[0] != netip.MustParseAddr("11.0.0.9") {
		t.Fatalf("a.test through the resolver: %+v", j)
	}
	if j := h.d.Decide(ctx, hostOf(t, "rebind.a.test"), 443); j.Allowed() || j.Addr != netip.MustParseAddr("10.1.1.1") {
		t.Fatalf("rebinding answer admitted: %+v", j)
	}
	if j := h.d.Decide(ctx, hostOf(t, "nx.a.test"), 443); j.Allowed() {
		t.Fatalf("nx.a.test admitted: %+v", j)
	}
	q := strings.Join(up.questions(), ",")
	if q != "a.test/A,a.test/AAAA,rebind.a.test/A,rebind.a.test/AAAA,nx.a.test/A,nx.a.test/AAAA" {
		t.Fatalf("resolver saw %s", q)
	}
}

func TestParseAddHost(t *testing.T) {
	tests := []struct {
		in, name, addr, err string
	}{
		{"example.com:203.0.113.7", "example.com", "203.0.113.7", ""},
		{"Example.COM.:10.0.0.1", "example.com", "10.0.0.1", ""},
		{"v6.test:[2001:db8::7]", "v6.test", "2001:db8::7", ""},
		{"v6.test:2001:db8::7", "v6.test", "2001:db8::7", ""},
		{"m.test:::ffff:10.0.0.1", "m.test", "10.0.0.1", ""},
		{"noaddr", "", "", "write NAME:IP"},
		{"x.test:", "", "", "write NAME:IP"},
		{":1.2.3.4", "", "", "write NAME:IP"},
		{"x.test:not-an-ip", "", "", "is not an IP address"},
		{"x.test:[::1", "", "", "unclosed bracket"},
		{"1.2.3.4:5.6.7.8", "", "", "is an address, not a name"},
		{"x.test:fe80::1%eth0", "", "", "drop the zone"},
		{"bad name:1.2.3.4", "", "", "add-host"},
	}
	for _, tt := range tests {
		name, addr, err := ParseAddHost(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseAddHost(%q) error %v, want it to contain %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || name != tt.name || addr.String() != tt.addr {
			t.Errorf("ParseAddHost(%q) = %q, %v, %v; want %q, %s", tt.in, name, addr, err, tt.name, tt.addr)
		}
	}
}
