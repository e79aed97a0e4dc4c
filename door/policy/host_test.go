package policy

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestCanonicalHostAddresses(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		// IPv4 spellings of loopback.
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.0000.0000.0001", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"0X7F.0.0.1", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0x00007f000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f.0.1", "127.0.0.1"},
		{"0177.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"0x.0x.0x.0x", "0.0.0.0"},
		{"0x7f.0.0.0x", "127.0.0.0"},
		{"0", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"169.254.43518", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"025177524776", "169.254.169.254"},
		{"10.0.0.1", "10.0.0.1"},
		// Full-width digits and dots map to ASCII under IDNA.
		{"１２７.０.０.１", "127.0.0.1"},
		{"127。0。0。1", "127.0.0.1"},
		// IPv6 spellings.
		{"::1", "::1"},
		{"[::1]", "::1"},
		{"0:0:0:0:0:0:0:1", "::1"},
		{"[0000:0000:0000:0000:0000:0000:0000:0001]", "::1"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"::ffff:7f00:1", "127.0.0.1"},
		{"::FFFF:7F00:0001", "127.0.0.1"},
		{"0:0:0:0:0:ffff:127.0.0.1", "127.0.0.1"},
		{"::127.0.0.1", "::7f00:1"},
		{"64:ff9b::127.0.0.1", "64:ff9b::7f00:1"},
		{"FD00:EC2::254", "fd00:ec2::254"},
	}
	for _, tt := range tests {
		h, err := CanonicalHost(tt.in)
		if err != nil {
			t.Errorf("CanonicalHost(%q): %v", tt.in, err)
			continue
		}
		if h.Name != "" || h.Addr.String() != tt.want {
			t.Errorf("CanonicalHost(%q) = name %q addr %v, want addr %s", tt.in, h.Name, h.Addr, tt.want)
		}
	}
}

func TestCanonicalHostNames(t *testing.T) {
	tests := []struct{ in, want string }{
		{"github.com", "github.com"},
		{"GitHub.COM", "github.com"},
		{"github.com.", "github.com"},
		{"localhost", "localhost"},
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"a-b.example", "a-b.example"},
		{"Bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.example.", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"XN--BCHER-KVA.Example", "xn--bcher-kva.example"},
		{"ｅｘａｍｐｌｅ.com", "example.com"},
		{"example。com", "example.com"},
		{"127.0.0.1.nip.io", "127.0.0.1.nip.io"},
		{"0x7f.example", "0x7f.example"},
		{"1e3", "1e3"},
		{"123.com", "123.com"},
		{strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com"},
	}
	for _, tt := range tests {
		h, err := CanonicalHost(tt.in)
		if err != nil {
			t.Errorf("CanonicalHost(%q): %v", tt.in, err)
			continue
		}
		if h.Name != tt.want || h.Addr.IsValid() {
			t.Errorf("CanonicalHost(%q) = name %q addr %v, want name %q", tt.in, h.Name, h.Addr, tt.want)
		}
	}
}

func TestCanonicalHostRejects(t *testing.T) {
	long := strings.Repeat("a", 60)
	tests := []struct{ in, why string }{
		{"", "empty host"},
		{".", "empty name"},
		{"..", "empty label"},
		{"a..b", "empty label"},
		{".example.com", "empty label"},
		{"example.com..", "empty label"},
		{"exa mple.com", "space or control"},
		{" github.com", "space or control"},
		{"github.com\n", "space or control"},
		{"git\x00hub.com", "space or control"},
		{"user@host.test", "user info"},
		{"evil.test:443.allowed.test", "not an IPv6 address"},
		{"github.com:443", "not an IPv6 address"},
		{"fe80::1%eth0", "zone identifiers"},
		{"[fe80::1%25eth0]", "zone identifiers"},
		{"evil.test/allowed.test", "path separator"},
		{`evil.test\allowed.test`, "path separator"},
		{"evil%2etest", "percent"},
		{"evil.test#x", "no host name may hold"},
		{"*.example.com", "no host name may hold"},
		{"-lead.example", "hyphen"},
		{"trail-.example", "hyphen"},
		{strings.Repeat("a", 64) + ".com", "labels are at most 63"},
		{strings.Join([]string{long, long, long, long, long}, "."), "at most 253"},
		{strings.Repeat("a", 2000), "longer than any DNS name"},
		// Numeric-looking last label: an address attempt, never a name.
		{"foo.123", "not a valid one"},
		{"example.0x1", "not a valid one"},
		{"256.0.0.1", "not a valid one"},
		{"1.2.3.4.5", "not a valid one"},
		{"4294967296", "not a valid one"},
		{"08.0.0.1", "not a valid one"},
		{"0x1g.0.0.1", "hold"}, // falls through to the name path: 0x1g is a label, 1 is numeric
		{"127.0.0.256", "not a valid one"},
		{"1.2.65536", "not a valid one"},
		{"99999999999999999999", "not a valid one"},
		{"[1.2.3.4]", "not a valid IPv6"},
		{"[::1", "closing"},
		{"::1::2", "not a valid IPv6"},
		{"::ffff:0x7f.1", "not a valid IPv6"},
		{"\xff.example", "UTF-8"},
		{"ex_ämple.com", "internationalised"},
		{"xn--zz.example", "internationalised"},
		{"a⒈com", "internationalised"},
	}
	for _, tt := range tests {
		h, err := CanonicalHost(tt.in)
		if err == nil {
			t.Errorf("CanonicalHost(%q) = %+v, want an error", tt.in, h)
			continue
		}
		if !errors.Is(err, ErrInvalidHost) {
			t.Errorf("CanonicalHost(%q) error %v does not wrap ErrInvalidHost", tt.in, err)
		}
		if tt.why == "hold" {
			continue
		}
		if !strings.Contains(err.Error(), tt.why) {
			t.Errorf("CanonicalHost(%q) error %q, want it to say %q", tt.in, err, tt.why)
		}
	}
}

func TestSplitTarget(t *testing.T) {
	tests := []struct {
		in       string
		def      uint16
		wantHost string
		wantPort uint16
	}{
		{"github.com", 443, "github.com", 443},
		{"github.com", 0, "github.com", 0},
		{"GitHub.com:80", 443, "github.com", 80},
		{"github.com.:8443", 443, "github.com", 8443},
		{"1.2.3.4:80", 443, "1.2.3.4", 80},
		{"1.2.3.4", 443, "1.2.3.4", 443},
		{"2130706433:443", 80, "127.0.0.1", 443},
		{"[::1]:443", 80, "::1", 443},
		{"[::1]", 80, "::1", 80},
		{"::1", 80, "::1", 80},
		{"2001:db8::1", 443, "2001:db8::1", 443},
		{"[::ffff:127.0.0.1]:22", 80, "127.0.0.1", 22},
		{"example.com:065535", 80, "example.com", 65535},
	}
	for _, tt := range tests {
		h, port, err := SplitTarget(tt.in, tt.def)
		if err != nil {
			t.Errorf("SplitTarget(%q): %v", tt.in, err)
			continue
		}
		if h.String() != tt.wantHost || port != tt.wantPort {
			t.Errorf("SplitTarget(%q, %d) = %s, %d; want %s, %d", tt.in, tt.def, h, port, tt.wantHost, tt.wantPort)
		}
	}

	bad := []struct{ in, why string }{
		{"evil.test:443.allowed.test", "port must be"},
		{"github.com:", "port must be"},
		{"github.com:0", "port must be"},
		{"github.com:65536", "port must be"},
		{"github.com:+443", "port must be"},
		{"github.com:443 ", "port must be"},
		{"github.com:0x1bb", "port must be"},
		{"github.com:0000065536", "port must be"},
		{"[::1]:", "port must be"},
		{"[::1]x", "after ']'"},
		{"[::1", "closing"},
		{"[github.com]:443", "not a valid IPv6"},
		{"user@github.com:443", "user info"},
		{"[fe80::1%eth0]:443", "zone"},
		{"", "empty host"},
		{":443", "empty host"},
	}
	for _, tt := range bad {
		h, port, err := SplitTarget(tt.in, 443)
		if err == nil {
			t.Errorf("SplitTarget(%q) = %v, %d; want an error", tt.in, h, port)
			continue
		}
		if !errors.Is(err, ErrInvalidHost) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("SplitTarget(%q) error %q, want ErrInvalidHost saying %q", tt.in, err, tt.why)
		}
	}
}

// TestCanonicalFastPathAgrees checks that the allocation-free paths give the
// same answer as the general one.
func TestCanonicalFastPathAgrees(t *testing.T) {
	for _, s := range []string{"github.com", "a.b", "x_y.z", "1.2.3.4", "127.1", "0x7f.1", "ab.12", "abc.def", "a.0x", "xn--bcher-kva.example"} {
		fast, ferr := CanonicalHost(s)
		slow, serr := canonicalSlow(s)
		if (ferr == nil) != (serr == nil) || fast != slow {
			t.Errorf("%q: fast path %+v (%v), general path %+v (%v)", s, fast, ferr, slow, serr)
		}
	}
}

func TestCanonicalHostDoesNotAllocateForCanonicalInput(t *testing.T) {
	for _, s := range []string{"api.github.com", "10.0.0.1"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = CanonicalHost(s) }); n != 0 {
			t.Errorf("CanonicalHost(%q) allocates %v times per call", s, n)
		}
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"github.com", "GitHub.COM.", "2130706433", "0x7f.1", "[::1]", "::ffff:127.0.0.1",
		"Bücher.example", "xn--bcher-kva.example", "fe80::1%eth0", "a..b", "user@host", "１２７.０.０.１", "_a.b", "0x.0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := CanonicalHost(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("CanonicalHost(%q) error %v does not wrap ErrInvalidHost", s, err)
			}
			return
		}
		if (h.Name == "") == !h.Addr.IsValid() {
			t.Fatalf("CanonicalHost(%q) = %+v: want exactly one of name and address", s, h)
		}
		if h.Addr.IsValid() {
			if h.Addr.Zone() != "" || h.Addr.Is4In6() {
				t.Fatalf("CanonicalHost(%q) = %v: zone or mapped address survived", s, h.Addr)
			}
			again, err := CanonicalHost(h.Addr.String())
			if err != nil || again != h {
				t.Fatalf("address %v of %q does not canonicalise to itself: %+v, %v", h.Addr, s, again, err)
			}
			return
		}
		if strings.Trim(h.Name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			t.Fatalf("CanonicalHost(%q) = %q, which is not in canonical form", s, h.Name)
		}
		again, err := CanonicalHost(h.Name)
		if err != nil || again != h {
			t.Fatalf("canonical name %q of %q is not a fixed point: %+v, %v", h.Name, s, again, err)
		}
		if _, err := netip.ParseAddr(h.Name); err == nil {
			t.Fatalf("accepted name %q parses as an address", h.Name)
		}
		if _, ok := parseIPv4Loose(h.Name); ok {
			t.Fatalf("accepted name %q parses as a loose IPv4 address", h.Name)
		}
	})
}

func FuzzSplitTarget(f *testing.F) {
	for _, s := range []string{"github.com:443", "[::1]:80", "::1", "1.2.3.4:80", "evil.test:443.allowed.test", "[::1]x", "a:0"} {
		f.Add(s, uint16(443))
	}
	f.Fuzz(func(t *testing.T, s string, def uint16) {
		h, port, err := SplitTarget(s, def)
		if err != nil {
			if !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("SplitTarget(%q) error %v does not wrap ErrInvalidHost", s, err)
			}
			return
		}
		if !strings.Contains(s, ":") && port != def || port == 0 && def != 0 {
			t.Fatalf("SplitTarget(%q, %d) port %d", s, def, port)
		}
		c, err := CanonicalHost(h.String())
		if err != nil || c != h {
			t.Fatalf("host %+v of %q is not canonical: %+v, %v", h, s, c, err)
		}
		// Joining back and splitting again gives the same target.
		joined := h.String()
		if h.Addr.Is6() {
			joined = "[" + joined + "]"
		}
		if port != 0 {
			joined += ":" + strconv.Itoa(int(port))
		}
		h2, port2, err := SplitTarget(joined, def)
		if err != nil || h2 != h || port2 != port {
			t.Fatalf("SplitTarget(%q) = %+v, %d, %v; from %q want %+v, %d", joined, h2, port2, err, s, h, port)
		}
	})
}
