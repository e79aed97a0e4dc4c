package machine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrBadDest is an ssh destination that cannot be parsed.
var ErrBadDest = errors.New("bad ssh destination")

// Dest is an ssh destination as a person writes it: [user@]host[:port], where host
// may be an alias from ~/.ssh/config or a bracketed IPv6 address.
type Dest struct {
	User string
	Host string
	Port int // 0: not given
}

// ParseDest parses [user@]host[:port]. An ssh:// URL is accepted too.
func ParseDest(s string) (Dest, error) {
	orig := s
	s = strings.TrimPrefix(s, "ssh://")
	var d Dest
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		d.User, s = s[:i], s[i+1:]
		if d.User == "" {
			return Dest{}, fmt.Errorf("%w %q: empty user before '@'", ErrBadDest, orig)
		}
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			end := strings.IndexByte(s, ']')
			if end < 0 || end != len(s)-1 {
				return Dest{}, fmt.Errorf("%w %q: write an IPv6 address as [addr] or [addr]:port", ErrBadDest, orig)
			}
			h = s[1:end]
		}
		host, port = h, p
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	if host == "" {
		return Dest{}, fmt.Errorf("%w %q: no host; write [user@]host[:port] or an alias from ~/.ssh/config", ErrBadDest, orig)
	}
	if strings.ContainsAny(host, " \t/\\'\"[]@") || strings.ContainsFunc(host, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Dest{}, fmt.Errorf("%w %q: the host has characters no host name has", ErrBadDest, orig)
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return Dest{}, fmt.Errorf("%w %q: %q is neither a host name nor an IPv6 address", ErrBadDest, orig, host)
		}
	}
	d.Host = host
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return Dest{}, fmt.Errorf("%w %q: port %q is not a number from 1 to 65535", ErrBadDest, orig, port)
		}
		d.Port = n
	}
	return d, nil
}

func (d Dest) String() string {
	s := d.Host
	if strings.Contains(s, ":") {
		s = "[" + s + "]"
	}
	if d.Port != 0 {
		s += ":" + strconv.Itoa(d.Port)
	}
	if d.User != "" {
		s = d.User + "@" + s
	}
	return s
}
