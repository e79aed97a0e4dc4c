package policy

import (
	"net/netip"
	"testing"
)

func TestFloor(t *testing.T) {
	tests := []struct {
		addr   string
		reason string // "" means not floored
	}{
		{"0.0.0.0", "hard floor: unspecified address"},
		{"0.0.0.1", "hard floor: this network"},
		{"0.255.255.255", "hard floor: this network"},
		{"1.0.0.0", ""},
		{"126.255.255.255", ""},
		{"127.0.0.0", "hard floor: loopback"},
		{"127.0.0.1", "hard floor: loopback"},
		{"127.255.255.255", "hard floor: loopback"},
		{"128.0.0.0", ""},
		{"169.253.255.255", ""},
		{"169.254.0.0", "hard floor: link-local"},
		{"169.254.169.254", "hard floor: cloud metadata address"},
		{"169.254.169.253", "hard floor: link-local"},
		{"169.254.170.2", "hard floor: link-local"},
		{"169.254.255.255", "hard floor: link-local"},
		{"169.255.0.0", ""},
		{"100.100.100.200", "hard floor: cloud metadata address"},
		{"100.100.100.199", ""}, // private (CGNAT), not floor
		{"168.63.129.16", "hard floor: cloud metadata address"},
		{"168.63.129.17", ""},
		{"198.17.255.255", ""},
		{"198.18.0.0", "hard floor: fake address of the wall's DNS"},
		{"198.19.255.255", "hard floor: fake address of the wall's DNS"},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"224.0.0.0", "hard floor: multicast"},
		{"224.0.0.251", "hard floor: multicast"},
		{"239.255.255.255", "hard floor: multicast"},
		{"240.0.0.0", "hard floor: reserved"},
		{"255.255.255.254", "hard floor: reserved"},
		{"255.255.255.255", "hard floor: broadcast"},
		{"192.0.0.170", "hard floor: reserved"},
		{"192.88.99.1", "hard floor: reserved"},
		{"192.0.2.1", "hard floor: documentation range"},
		{"198.51.100.7", "hard floor: documentation range"},
		{"203.0.113.255", "hard floor: documentation range"},
		{"203.0.114.0", ""},
		{"8.8.8.8", ""},
		{"10.0.0.1", ""},        // private, decided by allow_cidrs
		{"172.16.0.1", ""},      // private
		{"192.168.1.1", ""},     // private
		{"100.64.0.1", ""},      // private (CGNAT)
		{"fd12:3456::1", ""},    // private (ULA)
		{"2606:4700::1111", ""}, // public v6
		// IPv6.
		{"::", "hard floor: unspecified address"},
		{"::1", "hard floor: loopback"},
		{"fe80::", "hard floor: link-local"},
		{"fe80::1", "hard floor: link-local"},
		{"febf:ffff::1", "hard floor: link-local"},
		{"fec0::1", "hard floor: reserved"},
		{"fd00:ec2::254", "hard floor: cloud metadata address"},
		{"fd00:ec2::253", ""}, // private (ULA)
		{"ff02::1", "hard floor: multicast"},
		{"ff05::2", "hard floor: multicast"},
		{"2001:2::1", "hard floor: fake address of the wall's DNS"},
		{"2001:2:0:ffff::1", "hard floor: fake address of the wall's DNS"},
		{"2001:3::1", ""},
		{"2001:db8::1", "hard floor: documentation range"},
		{"3fff::1", "hard floor: documentation range"},
		{"100::1", "hard floor: reserved"},
		{"2001:10::1", "hard floor: reserved"},
		{"2001:20::1", "hard floor: reserved"},
		// IPv4 inside IPv6 is judged as the IPv4 address.
		{"::ffff:127.0.0.1", "hard floor: loopback"},
		{"::ffff:169.254.169.254", "hard floor: cloud metadata address"},
		{"::ffff:8.8.8.8", ""},
		{"::127.0.0.1", "hard floor: loopback"},
		{"::169.254.169.254", "hard floor: cloud metadata address"},
		{"::0.0.0.2", "hard floor: this network"},
		{"::8.8.8.8", ""},
		{"::ffff:0:127.0.0.1", "hard floor: loopback"}, // SIIT
		{"64:ff9b::127.0.0.1", "hard floor: loopback"},
		{"64:ff9b::169.254.169.254", "hard floor: cloud metadata address"},
		{"64:ff9b::224.0.0.1", "hard floor: multicast"},
		{"64:ff9b::8.8.8.8", ""},
		{"64:ff9b:1::127.0.0.1", "hard floor: loopback"},
		{"2002:7f00:1::", "hard floor: loopback"},
		{"2002:a9fe:a9fe::1", "hard floor: cloud metadata address"},
		{"2002:0808:0808::1", ""},
		// Teredo: client is the last 32 bits inverted; the server sits in bits 32..63.
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "hard floor: loopback"},               // client 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:5601:5601", "hard floor: cloud metadata address"}, // client 169.254.169.254
		{"2001:0:7f00:1:8000:63bf:f7f7:f7f7", "hard floor: loopback"},                  // server 127.0.0.1, client 8.8.8.8
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},                                   // server 65.54.227.120, client 8.8.8.8
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		reason, floored := Floor(a)
		if floored != (tt.reason != "") || reason != tt.reason {
			t.Errorf("Floor(%s) = %q, %v; want %q", tt.addr, reason, floored, tt.reason)
		}
	}
}

func TestFloorInvalidAddress(t *testing.T) {
	if _, floored := Floor(netip.Addr{}); !floored {
		t.Error("Floor(invalid address) is not floored")
	}
}

func TestFloorZone(t *testing.T) {
	if r, _ := Floor(netip.MustParseAddr("fe80::1%eth0")); r != "hard floor: link-local" {
		t.Errorf("Floor(fe80::1%%eth0) = %q", r)
	}
}

// TestFloorCoversEveryLiteralSpelling runs the spellings of floored addresses
// through CanonicalHost and then Floor, as the door does.
func TestFloorCoversEveryLiteralSpelling(t *testing.T) {
	for _, s := range []string{
		"2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1", "127.0.1", "[::1]",
		"::ffff:127.0.0.1", "::ffff:7f00:1", "0:0:0:0:0:ffff:127.0.0.1", "::127.0.0.1",
		"169.254.43518", "0xa9fea9fe", "[::ffff:a9fe:a9fe]", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::",
		"0", "0.0.0.0", "[::]", "198.18.0.1", "[2001:2::1]", "１２７.０.０.１",
	} {
		h, err := CanonicalHost(s)
		if err != nil {
			t.Errorf("CanonicalHost(%q): %v", s, err)
			continue
		}
		if r, floored := Floor(h.Addr); !floored {
			t.Errorf("%q (%v) is not floored", s, h.Addr)
		} else if r == "" {
			t.Errorf("%q floored without a reason", s)
		}
	}
}

func TestPrivate(t *testing.T) {
	tests := []struct {
		addr    string
		private bool
	}{
		{"10.0.0.0", true}, {"10.255.255.255", true}, {"11.0.0.0", false}, {"9.255.255.255", false},
		{"172.15.255.255", false}, {"172.16.0.0", true}, {"172.31.255.255", true}, {"172.32.0.0", false},
		{"192.167.255.255", false}, {"192.168.0.0", true}, {"192.168.255.255", true}, {"192.169.0.0", false},
		{"100.63.255.255", false}, {"100.64.0.0", true}, {"100.127.255.255", true}, {"100.128.0.0", false},
		{"fbff::1", false}, {"fc00::1", true}, {"fdff:ffff::1", true}, {"fe00::1", false},
		{"64:ff9b::10.0.0.1", true}, {"64:ff9b::8.8.8.8", false}, {"64:ff9b:1::8.8.8.8", true},
		{"2002:c0a8:0101::1", true}, {"::10.1.2.3", true},
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", true}, // Teredo client 10.0.0.1
		{"2001:0:0a00:1:8000:63bf:f7f7:f7f7", true},    // Teredo server 10.0.0.1
		{"8.8.8.8", false}, {"2606:4700::1111", false},
	}
	for _, tt := range tests {
		if got := isPrivate(netip.MustParseAddr(tt.addr)); got != tt.private {
			t.Errorf("isPrivate(%s) = %v, want %v", tt.addr, got, tt.private)
		}
	}
}

// FuzzFloorHolds: for any address at all, a policy that lists every address
// in allow_cidrs, in either mode, denies exactly the floored ones.
func FuzzFloorHolds(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1})
	f.Add(netip.MustParseAddr("64:ff9b::a9fe:a9fe").AsSlice())
	f.Add(netip.MustParseAddr("2001:0:4136:e378:8000:63bf:80ff:fffe").AsSlice())
	enforce, err := Parse("e.hcl", []byte(`allow = ["x.test"]
allow_cidrs = ["0.0.0.0/0", "::/0"]`))
	if err != nil {
		f.Fatal(err)
	}
	observe, err := Parse("o.hcl", []byte(`mode = "observe"`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		_, floored := Floor(a)
		for _, p := range []*Policy{enforce, observe} {
			for _, name := range []string{"", "x.test"} {
				d := p.DecideAddr(a, 443, name)
				if floored != (d.Verdict == Deny) || floored != d.Floor {
					t.Fatalf("%s mode %v name %q: floored=%v decision %+v", a, p.Mode, name, floored, d)
				}
			}
		}
	})
}
