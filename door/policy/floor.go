package policy

import (
	"net/netip"
)

// The ranges the wall's DNS hands fake addresses out of. Both are benchmarking
// ranges (RFC 2544, RFC 5180) that never appear on the internet, and both are
// in the hard floor: a connection to a fake address is mapped back to its name
// by the door, and never dialled.
var (
	FakeIPv4 = netip.MustParsePrefix("198.18.0.0/15")
	FakeIPv6 = netip.MustParsePrefix("2001:2::/48")
)

// Floor reasons. They are stable phrases that events and tests compare.
const (
	reasonSelf = "hard floor: the door's own address"
)

type floorRange struct {
	prefix netip.Prefix
	reason string
}

// floor4 and floor6 are searched in order, so narrow entries with a more
// telling reason come before the wide range that contains them.
//
// Documentation ranges are floored: no real service lives there, and a
// destination there is a sign of a made-up or probing address.
var floor4 = []floorRange{
	{netip.MustParsePrefix("0.0.0.0/32"), "hard floor: unspecified address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "hard floor: this network"},
	{netip.MustParsePrefix("127.0.0.0/8"), "hard floor: loopback"},
	{netip.MustParsePrefix("169.254.169.254/32"), "hard floor: cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "hard floor: link-local"},
	{netip.MustParsePrefix("100.100.100.200/32"), "hard floor: cloud metadata address"},
	{netip.MustParsePrefix("168.63.129.16/32"), "hard floor: cloud metadata address"},
	{FakeIPv4, "hard floor: fake address of the wall's DNS"},
	{netip.MustParsePrefix("224.0.0.0/4"), "hard floor: multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "hard floor: broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "hard floor: reserved"},
	{netip.MustParsePrefix("192.0.0.0/24"), "hard floor: reserved"},
	{netip.MustParsePrefix("192.88.99.0/24"), "hard floor: reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "hard floor: documentation range"},
	{netip.MustParsePrefix("198.51.100.0/24"), "hard floor: documentation range"},
	{netip.MustParsePrefix("203.0.113.0/24"), "hard floor: documentation range"},
}

var floor6 = []floorRange{
	{netip.MustParsePrefix("::/128"), "hard floor: unspecified address"},
	{netip.MustParsePrefix("::1/128"), "hard floor: loopback"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "hard floor: cloud metadata address"},
	{netip.MustParsePrefix("fe80::/10"), "hard floor: link-local"},
	{netip.MustParsePrefix("fec0::/10"), "hard floor: reserved"}, // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), "hard floor: multicast"},
	{FakeIPv6, "hard floor: fake address of the wall's DNS"},
	{netip.MustParsePrefix("100::/64"), "hard floor: reserved"},     // discard-only
	{netip.MustParsePrefix("2001:10::/28"), "hard floor: reserved"}, // ORCHID
	{netip.MustParsePrefix("2001:20::/28"), "hard floor: reserved"}, // ORCHIDv2
	{netip.MustParsePrefix("2001:db8::/32"), "hard floor: documentation range"},
	{netip.MustParsePrefix("3fff::/20"), "hard floor: documentation range"},
}

// private ranges are denied unless an allow_cidrs entry contains the address.
var private4 = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

var private6 = []netip.Prefix{
	netip.MustParsePrefix("fc00::/7"),
	// Local-use NAT64 (RFC 8215): the operator's own translator.
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// Prefixes of IPv6 addresses that carry an IPv4 address inside them.
var (
	compat4   = netip.MustParsePrefix("::/96")           // IPv4-compatible, deprecated
	siit4     = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated (SIIT)
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
)

// embedded returns the IPv4 addresses an IPv6 address carries: the one a
// packet to it would reach (first), and for Teredo the server as well. a must
// already be unmapped.
func embedded(a netip.Addr) (dst, other netip.Addr) {
	if !a.Is6() {
		return netip.Addr{}, netip.Addr{}
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case compat4.Contains(a), siit4.Contains(a), nat64.Contains(a), nat64Loc.Contains(a):
		return last, netip.Addr{}
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), netip.Addr{}
	case teredo.Contains(a):
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		server := netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
		return client, server
	}
	return netip.Addr{}, netip.Addr{}
}

// Floor reports whether a is in the hard floor, the destinations no policy
// can open, and why. An IPv4 address hidden inside IPv6 (mapped, IPv4-
// compatible, SIIT, NAT64, 6to4, Teredo client or server) is judged as that
// IPv4 address. The door's own addresses are floored by Policy.WithSelf.
func Floor(a netip.Addr) (reason string, floored bool) {
	if !a.IsValid() {
		return "hard floor: not an address", true
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return floorOf(a, floor4)
	}
	if r, ok := floorOf(a, floor6); ok {
		return r, true
	}
	dst, other := embedded(a)
	if dst.IsValid() {
		if r, ok := floorOf(dst, floor4); ok {
			return r, true
		}
	}
	if other.IsValid() {
		if r, ok := floorOf(other, floor4); ok {
			return r, true
		}
	}
	return "", false
}

func floorOf(a netip.Addr, ranges []floorRange) (string, bool) {
	for i := range ranges {
		if ranges[i].prefix.Contains(a) {
			return ranges[i].reason, true
		}
	}
	return "", false
}

// Private reports whether a is in a private range (RFC 1918, CGNAT, ULA, …),
// itself or through the IPv4 address it carries: an address only allow_cidrs
// opens, whatever name led to it.
func Private(a netip.Addr) bool {
	a = a.Unmap()
	if _, floored := Floor(a); floored {
		return false
	}
	return isPrivate(a)
}

// isPrivate reports whether a (unmapped, not floored) is in a private range,
// itself or through the IPv4 address it carries.
func isPrivate(a netip.Addr) bool {
	if a.Is4() {
		return inAny(a, private4)
	}
	if inAny(a, private6) {
		return true
	}
	dst, other := embedded(a)
	return dst.IsValid() && inAny(dst, private4) || other.IsValid() && inAny(other, private4)
}

func inAny(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
