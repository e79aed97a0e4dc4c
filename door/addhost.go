package door

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/postern-dev/postern/door/policy"
)

// ParseAddHost reads an --add-host pin, NAME:IP. An IPv6 address may be written
// in brackets (NAME:[::1]) or bare after the first colon (NAME:2001:db8::1).
// The name comes back canonical.
func ParseAddHost(s string) (string, netip.Addr, error) {
	name, ip, ok := strings.Cut(s, ":")
	if !ok || name == "" || ip == "" {
		return "", netip.Addr{}, fmt.Errorf("add-host %q: write NAME:IP, e.g. example.com:203.0.113.7 or example.com:[2001:db8::7]", s)
	}
	if strings.HasPrefix(ip, "[") {
		if !strings.HasSuffix(ip, "]") {
			return "", netip.Addr{}, fmt.Errorf("add-host %q: unclosed bracket around the address", s)
		}
		ip = ip[1 : len(ip)-1]
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("add-host %q: %q is not an IP address: write NAME:IP", s, ip)
	}
	if a.Zone() != "" {
		return "", netip.Addr{}, fmt.Errorf("add-host %q: drop the zone %%%s from the address", s, a.Zone())
	}
	h, err := policy.CanonicalHost(name)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("add-host %q: %w", s, err)
	}
	if h.Name == "" {
		return "", netip.Addr{}, fmt.Errorf("add-host %q: %q is an address, not a name: write NAME:IP", s, name)
	}
	return h.Name, a.Unmap(), nil
}
