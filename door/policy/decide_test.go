package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

const decideSrc = `ports = [80, 443, 8443]
allow = ["github.com", "registry.npmjs.org:443", "*.wild.test", "internal.corp.test", "api.svc.test:8443"]
deny = ["gist.github.com", "github.com:80"]
allow_cidrs = ["10.20.0.0/16", "203.0.114.0/24", "fd12:3456::/48"]
`

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("p.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecideName(t *testing.T) {
	p := mustParse(t, decideSrc)
	tests := []struct {
		name    string
		port    uint16
		verdict Verdict
		reason  string
		rule    string
	}{
		{"github.com", 443, Allow, ReasonAllowedByRule, "github.com (p.hcl:2:10)"},
		{"api.github.com", 443, Allow, ReasonAllowedByRule, "github.com (p.hcl:2:10)"},
		{"a.b.c.github.com", 8443, Allow, ReasonAllowedByRule, "github.com (p.hcl:2:10)"},
		{"GitHub.COM.", 443, Allow, ReasonAllowedByRule, "github.com (p.hcl:2:10)"},
		{"notgithub.com", 443, Deny, ReasonNoAllowRule, ""},
		{"github.com.evil.test", 443, Deny, ReasonNoAllowRule, ""},
		{"com", 443, Deny, ReasonNoAllowRule, ""},
		{"gist.github.com", 443, Deny, ReasonDeniedByRule, "gist.github.com (p.hcl:3:9)"},
		{"x.gist.github.com", 443, Deny, ReasonDeniedByRule, "gist.github.com (p.hcl:3:9)"},
		{"github.com", 80, Deny, ReasonDeniedByRule, "github.com:80 (p.hcl:3:28)"},
		{"api.github.com", 80, Deny, ReasonDeniedByRule, "github.com:80 (p.hcl:3:28)"},
		{"github.com", 22, Deny, "port 22 is not in the policy's ports", ""},
		{"github.com", 0, Deny, "port 0 is not in the policy's ports", ""},
		{"registry.npmjs.org", 443, Allow, ReasonAllowedByRule, "registry.npmjs.org:443 (p.hcl:2:24)"},
		{"registry.npmjs.org", 80, Deny, ReasonNoAllowRule, ""},
		{"api.svc.test", 8443, Allow, ReasonAllowedByRule, "api.svc.test:8443 (p.hcl:2:87)"},
		{"api.svc.test", 443, Deny, ReasonNoAllowRule, ""},
		{"wild.test", 443, Deny, ReasonNoAllowRule, ""},
		{"a.wild.test", 443, Allow, ReasonAllowedByRule, "*.wild.test (p.hcl:2:50)"},
		{"a.b.wild.test", 443, Allow, ReasonAllowedByRule, "*.wild.test (p.hcl:2:50)"},
		{"xwild.test", 443, Deny, ReasonNoAllowRule, ""},
		{"bad name", 443, Deny, ReasonInvalidHost, ""},
		{"evil.test:443.github.com", 443, Deny, ReasonInvalidHost, ""},
		// A literal given as a name is judged as the literal.
		{"2130706433", 443, Deny, "hard floor: loopback", ""},
		{"10.20.1.1", 443, Allow, ReasonAllowedByCIDR, "10.20.0.0/16 (p.hcl:4:16)"},
		{"8.8.8.8", 443, Deny, ReasonAddrNotAllowed, ""},
	}
	for _, tt := range tests {
		d := p.DecideName(tt.name, tt.port)
		if d.Verdict != tt.verdict || d.Reason != tt.reason || d.Rule != tt.rule || d.WouldDeny {
			t.Errorf("DecideName(%q, %d) = %+v; want %v %q %q", tt.name, tt.port, d, tt.verdict, tt.reason, tt.rule)
		}
	}

	// Observe mode: the same reasons, every denial allowed and marked.
	o := mustParse(t, "mode = \"observe\"\n"+decideSrc)
	for _, tt := range tests {
		d := o.DecideName(tt.name, tt.port)
		floor := strings.HasPrefix(tt.reason, "hard floor:")
		wantVerdict, wantWould := Allow, tt.verdict == Deny
		if floor {
			wantVerdict, wantWould = Deny, false
		}
		if d.Verdict != wantVerdict || d.WouldDeny != wantWould || d.Reason != tt.reason || d.Floor != floor {
			t.Errorf("observe DecideName(%q, %d) = %+v; want %v would_deny=%v %q", tt.name, tt.port, d, wantVerdict, wantWould, tt.reason)
		}
	}
}

func TestDecideAddr(t *testing.T) {
	p := mustParse(t, decideSrc)
	tests := []struct {
		addr    string
		port    uint16
		name    string
		verdict Verdict
		reason  string
		rule    string
	}{
		// The floor comes first, whatever the name or the CIDRs.
		{"127.0.0.1", 443, "github.com", Deny, "hard floor: loopback", ""},
		{"169.254.169.254", 80, "", Deny, "hard floor: cloud metadata address", ""},
		{"::ffff:169.254.169.254", 443, "github.com", Deny, "hard floor: cloud metadata address", ""},
		{"64:ff9b::7f00:1", 443, "github.com", Deny, "hard floor: loopback", ""},
		{"198.18.0.5", 443, "github.com", Deny, "hard floor: fake address of the wall's DNS", ""},
		{"fe80::1%eth0", 443, "github.com", Deny, "hard floor: link-local", ""},
		// A public address of an admitted name.
		{"140.82.112.3", 443, "github.com", Allow, ReasonResolvedOfName, "github.com (p.hcl:2:10)"},
		{"2606:50c0:8000::153", 443, "api.github.com", Allow, ReasonResolvedOfName, "github.com (p.hcl:2:10)"},
		// The name is judged again: a caller cannot skip it.
		{"140.82.112.3", 443, "gist.github.com", Deny, ReasonDeniedByRule, "gist.github.com (p.hcl:3:9)"},
		{"140.82.112.3", 443, "evil.test", Deny, ReasonNoAllowRule, ""},
		{"140.82.112.3", 22, "github.com", Deny, "port 22 is not in the policy's ports", ""},
		// A name never opens a private address; allow_cidrs does.
		{"10.0.0.5", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"192.168.1.1", 443, "github.com", Deny, ReasonPrivate, ""},
		{"100.64.0.1", 443, "github.com", Deny, ReasonPrivate, ""},
		{"100.100.100.200", 443, "github.com", Deny, "hard floor: cloud metadata address", ""},
		{"fd00::1", 443, "github.com", Deny, ReasonPrivate, ""},
		{"64:ff9b::a00:5", 443, "github.com", Deny, ReasonPrivate, ""},
		{"::ffff:10.0.0.5", 443, "github.com", Deny, ReasonPrivate, ""},
		{"10.20.3.4", 443, "internal.corp.test", Allow, ReasonAllowedByCIDR, "10.20.0.0/16 (p.hcl:4:16)"},
		{"::ffff:10.20.3.4", 443, "internal.corp.test", Allow, ReasonAllowedByCIDR, "10.20.0.0/16 (p.hcl:4:16)"},
		// An IPv6 form carrying an allowed IPv4 address is dialled as IPv6,
		// to wherever this host routes it: the IPv4 CIDR does not open it.
		{"64:ff9b::a14:304", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"2002:a14:304::", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"::a14:304", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"::ffff:0:a14:304", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"2001:0:4136:e378:8000:63bf:f5eb:fcfb", 443, "internal.corp.test", Deny, ReasonPrivate, ""},
		{"64:ff9b::a14:304", 443, "", Deny, ReasonPrivate, ""},
		{"2002:a14:304::1", 443, "", Deny, ReasonPrivate, ""},
		{"fd12:3456::9", 443, "internal.corp.test", Allow, ReasonAllowedByCIDR, "fd12:3456::/48 (p.hcl:4:50)"},
		// Literals: only allow_cidrs opens them, and only on the policy's ports.
		{"10.20.3.4", 443, "", Allow, ReasonAllowedByCIDR, "10.20.0.0/16 (p.hcl:4:16)"},
		{"10.20.3.4", 22, "", Deny, "port 22 is not in the policy's ports", ""},
		{"203.0.114.9", 8443, "", Allow, ReasonAllowedByCIDR, "203.0.114.0/24 (p.hcl:4:32)"},
		{"8.8.8.8", 443, "", Deny, ReasonAddrNotAllowed, ""},
		{"10.0.0.5", 443, "", Deny, ReasonPrivate, ""},
		{"2606:4700::1111", 443, "", Deny, ReasonAddrNotAllowed, ""},
	}
	for _, tt := range tests {
		a := netipMust(tt.addr)
		d := p.DecideAddr(a, tt.port, tt.name)
		floor := strings.HasPrefix(tt.reason, "hard floor:")
		if d.Verdict != tt.verdict || d.Reason != tt.reason || d.Rule != tt.rule || d.Floor != floor || d.WouldDeny {
			t.Errorf("DecideAddr(%s, %d, %q) = %+v; want %v %q %q", tt.addr, tt.port, tt.name, d, tt.verdict, tt.reason, tt.rule)
		}
	}

	o := mustParse(t, "mode = \"observe\"\n"+decideSrc)
	for _, tt := range tests {
		d := o.DecideAddr(netipMust(tt.addr), tt.port, tt.name)
		floor := strings.HasPrefix(tt.reason, "hard floor:")
		wantVerdict, wantWould := Allow, tt.verdict == Deny
		if floor {
			wantVerdict, wantWould = Deny, false
		}
		if d.Verdict != wantVerdict || d.WouldDeny != wantWould || d.Reason != tt.reason || d.Floor != floor {
			t.Errorf("observe DecideAddr(%s, %d, %q) = %+v; want %v would_deny=%v %q", tt.addr, tt.port, tt.name, d, wantVerdict, wantWould, tt.reason)
		}
	}
}

// TestEverythingCIDRNeverOpensTheFloor: 0.0.0.0/0 and ::/0 may be written, and
// open every public and private address, but not the floor.
func TestEverythingCIDRNeverOpensTheFloor(t *testing.T) {
	for _, mode := range []string{"enforce", "observe"} {
		p := mustParse(t, fmt.Sprintf("mode = %q\nallow_cidrs = [\"0.0.0.0/0\", \"::/0\"]\n", mode))
		for _, s := range []string{"127.0.0.1", "0.0.0.0", "169.254.169.254", "100.100.100.200", "168.63.129.16", "224.0.0.1",
			"255.255.255.255", "240.0.0.1", "198.18.0.1", "::1", "::", "fe80::1", "fd00:ec2::254", "ff02::1", "2001:2::1",
			"::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "2001:0:4136:e378:8000:63bf:80ff:fffe"} {
			if d := p.DecideAddr(netipMust(s), 443, ""); d.Verdict != Deny || !d.Floor {
				t.Errorf("%s: allow_cidrs everything opened %s: %+v", mode, s, d)
			}
		}
		for _, s := range []string{"10.0.0.1", "8.8.8.8", "fd12::1", "2606:4700::1111"} {
			if d := p.DecideAddr(netipMust(s), 443, ""); d.Verdict != Allow || d.WouldDeny {
				t.Errorf("%s: allow_cidrs everything did not open %s: %+v", mode, s, d)
			}
		}
	}
}

func TestWithSelf(t *testing.T) {
	p := mustParse(t, `allow = ["github.com"]
allow_cidrs = ["10.0.0.0/8"]`)
	self := p.WithSelf(netipMust("10.1.2.3"), netipMust("::ffff:10.1.2.4"), netipMust("2606:4700::5"))
	for _, s := range []string{"10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a01:203", "10.1.2.4", "2606:4700::5"} {
		d := self.DecideAddr(netipMust(s), 443, "github.com")
		if d.Verdict != Deny || !d.Floor || d.Reason != "hard floor: the door's own address" {
			t.Errorf("WithSelf: %s = %+v", s, d)
		}
		if sug := self.Suggest(Host{Addr: netipMust(s)}, 443); sug != "" {
			t.Errorf("Suggest for the door's own address %s = %q", s, sug)
		}
	}
	if d := self.DecideAddr(netipMust("10.1.2.5"), 443, ""); d.Verdict != Allow {
		t.Errorf("WithSelf floored a neighbour: %+v", d)
	}
	if d := p.DecideAddr(netipMust("10.1.2.3"), 443, ""); d.Verdict != Allow {
		t.Errorf("WithSelf changed the original policy: %+v", d)
	}
	// Observe mode never opens it either, and WithSelf accumulates.
	o := mustParse(t, "mode = \"observe\"").WithSelf(netipMust("192.168.9.9")).WithSelf(netipMust("192.168.9.10"))
	for _, s := range []string{"192.168.9.9", "192.168.9.10"} {
		if d := o.DecideAddr(netipMust(s), 80, ""); d.Verdict != Deny || !d.Floor {
			t.Errorf("observe WithSelf: %s = %+v", s, d)
		}
	}
}

func TestSuggest(t *testing.T) {
	p := mustParse(t, `ports = [80, 443]
allow = ["github.com"]
deny = ["gist.github.com"]`)
	tests := []struct {
		host Host
		port uint16
		want string
	}{
		{Host{Name: "evil.test"}, 443, `allow = ["evil.test:443"]`},
		{Host{Name: "Evil.Test."}, 80, `allow = ["evil.test:80"]`},
		{Host{Name: "evil.test"}, 8443, "ports = [80, 443, 8443]\n" + `allow = ["evil.test:8443"]`},
		{Host{Name: "gist.github.com"}, 443, ""},
		{Host{Name: "raw.gist.github.com"}, 443, ""},
		{Host{Name: "bad name"}, 443, ""},
		{Host{Name: "evil.test"}, 0, ""},
		{Host{Addr: netipMust("10.9.0.7")}, 443, `allow_cidrs = ["10.9.0.7/32"]`},
		{Host{Addr: netipMust("::ffff:10.9.0.7")}, 443, `allow_cidrs = ["10.9.0.7/32"]`},
		{Host{Addr: netipMust("64:ff9b::a09:7")}, 443, `allow_cidrs = ["10.9.0.7/32"]`},
		{Host{Addr: netipMust("fd12::7")}, 443, `allow_cidrs = ["fd12::7/128"]`},
		{Host{Addr: netipMust("8.8.8.8")}, 22, "ports = [22, 80, 443]\n" + `allow_cidrs = ["8.8.8.8/32"]`},
		{Host{Addr: netipMust("127.0.0.1")}, 443, ""},
		{Host{Addr: netipMust("169.254.169.254")}, 80, ""},
		{Host{Addr: netipMust("198.18.0.9")}, 443, ""},
		{Host{}, 443, ""},
	}
	for _, tt := range tests {
		if got := p.Suggest(tt.host, tt.port); got != tt.want {
			t.Errorf("Suggest(%+v, %d) = %q, want %q", tt.host, tt.port, got, tt.want)
		}
	}
}

// TestSuggestionsWork: adding what Suggest says to the policy allows the
// destination it was asked about.
func TestSuggestionsWork(t *testing.T) {
	// The suggestion is a whole attribute, so the base policy leaves allow,
	// allow_cidrs and ports out and the line can be added as it stands.
	base := "deny = [\"gist.github.com\"]\n"
	p := mustParse(t, base)
	cases := []struct {
		h    Host
		port uint16
	}{
		{Host{Name: "evil.test"}, 443},
		{Host{Name: "evil.test"}, 8443},
		{Host{Addr: netipMust("10.9.0.7")}, 443},
		{Host{Addr: netipMust("2606:4700::1111")}, 9000},
	}
	for _, c := range cases {
		s := p.Suggest(c.h, c.port)
		if s == "" {
			t.Fatalf("no suggestion for %v:%d", c.h, c.port)
		}
		q := mustParse(t, base+s+"\n")
		var d Decision
		if c.h.Name != "" {
			d = q.DecideName(c.h.Name, c.port)
		} else {
			d = q.DecideAddr(c.h.Addr, c.port, "")
		}
		if d.Verdict != Allow {
			t.Errorf("after adding %q, %v:%d is still %+v", s, c.h, c.port, d)
		}
	}
}

// TestHandBuiltPolicy: a Policy built as a literal, without Parse, decides
// the same way, rule text and all.
func TestHandBuiltPolicy(t *testing.T) {
	p := &Policy{
		Mode:       Enforce,
		Ports:      []uint16{443},
		Allow:      []HostRule{{Name: "github.com", Text: "github.com", Pos: "x:1:1"}},
		Deny:       []HostRule{{Name: "gist.github.com", Text: "gist.github.com"}},
		AllowCIDRs: []CIDRRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
	}
	if d := p.DecideName("api.github.com", 443); d.Verdict != Allow || d.Rule != "github.com (x:1:1)" {
		t.Errorf("%+v", d)
	}
	if d := p.DecideName("gist.github.com", 443); d.Verdict != Deny || d.Rule != "gist.github.com" {
		t.Errorf("%+v", d)
	}
	if d := p.DecideAddr(netipMust("10.1.1.1"), 443, ""); d.Verdict != Allow || d.Rule != "10.0.0.0/8" {
		t.Errorf("%+v", d)
	}
	var zero Policy
	if d := zero.DecideName("github.com", 443); d.Verdict != Deny {
		t.Errorf("zero policy: %+v", d)
	}
}

func TestDecisionsDoNotAllocate(t *testing.T) {
	p := mustParse(t, decideSrc)
	a := netipMust("140.82.112.3")
	private := netipMust("10.20.3.4")
	checks := map[string]func(){
		"DecideName allow":      func() { p.DecideName("api.github.com", 443) },
		"DecideName deny rule":  func() { p.DecideName("gist.github.com", 443) },
		"DecideName no rule":    func() { p.DecideName("evil.test", 443) },
		"DecideAddr named":      func() { p.DecideAddr(a, 443, "api.github.com") },
		"DecideAddr cidr":       func() { p.DecideAddr(private, 443, "") },
		"DecideAddr floor":      func() { p.DecideAddr(netipMust("::ffff:127.0.0.1"), 443, "") },
		"DecideAddr not listed": func() { p.DecideAddr(a, 443, "") },
	}
	for name, f := range checks {
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

func benchPolicy(b *testing.B, rules int) *Policy {
	var sb strings.Builder
	sb.WriteString("allow = [")
	for i := range rules {
		fmt.Fprintf(&sb, "%q, ", fmt.Sprintf("host%d.example%d.test", i, i%7))
	}
	sb.WriteString("\"github.com\"]\ndeny = [\"gist.github.com\"]\nallow_cidrs = [\"10.20.0.0/16\"]\n")
	return mustParse(b, sb.String())
}

func BenchmarkDecideName(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		p := benchPolicy(b, n)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p.DecideName("api.github.com", 443).Verdict != Allow {
					b.Fatal("denied")
				}
			}
		})
	}
}

func BenchmarkDecideAddr(b *testing.B) {
	p := benchPolicy(b, 10).WithSelf(netipMust("10.99.0.1"))
	a := netipMust("140.82.112.3")
	b.ReportAllocs()
	for b.Loop() {
		if p.DecideAddr(a, 443, "api.github.com").Verdict != Allow {
			b.Fatal("denied")
		}
	}
}

func BenchmarkCanonicalHost(b *testing.B) {
	for _, s := range []string{"api.github.com", "API.GitHub.com.", "Bücher.example", "0x7f.1"} {
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := CanonicalHost(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
