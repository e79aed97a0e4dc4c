package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrInvalidHost is wrapped by every CanonicalHost and SplitTarget failure.
var ErrInvalidHost = errors.New("invalid host")

const (
	maxNameLen  = 253
	maxLabelLen = 63
	// maxRawLen bounds the input before any work is done on it; IDNA mapping
	// can shrink text, so it is generous, but not unbounded.
	maxRawLen = 4 * maxNameLen
)

// String returns the name, or the address in its standard form.
func (h Host) String() string {
	if h.Name != "" {
		return h.Name
	}
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return ""
}

// IsAddr reports whether h is an IP address rather than a name.
func (h Host) IsAddr() bool { return h.Name == "" && h.Addr.IsValid() }

func invalidHost(s, why string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidHost, s, why)
}

// CanonicalHost turns a host as a client wrote it into the one form the policy
// judges.
//
// A name is lowercased, loses one trailing dot and has its internationalised
// labels converted to punycode (IDNA lookup rules). Labels hold letters,
// digits, hyphens and underscores (underscores occur in real DNS names), may
// not start or end with a hyphen, and are at most 63 bytes; the whole name is
// at most 253.
//
// Every spelling of an IP address is recognised as that address, never as a
// name: dotted IPv4 with decimal, octal (leading 0) or hex (0x) parts, the
// short forms with fewer than four parts (127.1, 2130706433), IPv6 with or
// without brackets, and IPv4 written inside IPv6. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is returned as the IPv4 address it denotes. A host whose
// last label looks numeric is an address attempt: if it is not a valid
// address it is rejected rather than treated as a name. Zone identifiers,
// user info, ports, paths, spaces and control characters are rejected.
func CanonicalHost(s string) (Host, error) {
	if s == "" {
		return Host{}, fmt.Errorf("%w: empty host", ErrInvalidHost)
	}
	if len(s) > maxRawLen {
		return Host{}, fmt.Errorf("%w: host of %d bytes is longer than any DNS name (%d)", ErrInvalidHost, len(s), maxNameLen)
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return Host{}, invalidHost(s, "bracketed address without closing ']'")
		}
		a, err := parseIPv6(s, s[1:len(s)-1])
		if err != nil {
			return Host{}, err
		}
		return Host{Addr: a}, nil
	}
	if strings.IndexByte(s, ':') >= 0 {
		a, err := parseIPv6(s, s)
		if err != nil {
			return Host{}, err
		}
		return Host{Addr: a}, nil
	}
	if isCanonicalName(s) {
		return Host{Name: s}, nil
	}
	if v4, ok := numericASCII(s); ok {
		a, ok := parseIPv4Loose(v4)
		if !ok {
			return Host{}, invalidHost(s, "looks like an IPv4 address but is not a valid one")
		}
		return Host{Addr: a}, nil
	}
	return canonicalSlow(s)
}

// parseIPv6 parses the text inside brackets, or a bare host containing ':'.
func parseIPv6(orig, s string) (netip.Addr, error) {
	if strings.IndexByte(s, '%') >= 0 {
		return netip.Addr{}, invalidHost(orig, "zone identifiers (%...) are not allowed; write the address without it")
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		if strings.Count(s, ":") == 1 {
			return netip.Addr{}, invalidHost(orig, "contains ':' but is not an IPv6 address; give the host alone, without a port")
		}
		return netip.Addr{}, invalidHost(orig, "not a valid IPv6 address")
	}
	if a.Is4In6() {
		return a.Unmap(), nil
	}
	return a, nil
}

// isCanonicalName reports, without allocating, whether s is already a
// canonical name: lowercase ASCII letters, digits, '-' and '_', valid labels,
// no trailing dot, no punycode label (those need IDNA validation) and a last
// label that does not look numeric.
func isCanonicalName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			c := s[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
				continue
			case c == '.':
			default:
				return false
			}
		}
		if !validLabel(s[start:i]) {
			return false
		}
		if i-start >= 4 && s[start:start+4] == "xn--" {
			return false
		}
		start = i + 1
	}
	return !looksNumeric(lastLabel(s))
}

// numericASCII returns s without one trailing dot when s is written only with
// the characters of IPv4 spellings and its last label looks numeric: the
// common literal case, judged without the allocations of the general path.
func numericASCII(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(isHex(c) || c == '.' || c == 'x' || c == 'X') {
			return "", false
		}
	}
	s = strings.TrimSuffix(s, ".")
	return s, looksNumeric(lastLabel(s))
}

// validLabel checks a label of lowercase ASCII letters, digits, '-' and '_'.
func validLabel(l string) bool {
	if len(l) == 0 || len(l) > maxLabelLen || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func lastLabel(s string) string {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// looksNumeric reports whether a label is what a URL parser or inet_aton
// would take as a number: decimal digits, or 0x followed by hex digits.
func looksNumeric(l string) bool {
	if l == "" {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// idnaDots are the characters IDNA treats as label separators besides '.'.
var idnaDots = strings.NewReplacer("\u3002", ".", "\uff0e", ".", "\uff61", ".")

func canonicalSlow(orig string) (Host, error) {
	s := orig
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			continue
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c <= ' ' || c == 0x7f:
			return Host{}, invalidHost(orig, "contains a space or control character")
		case c == '@':
			return Host{}, invalidHost(orig, "contains '@' (user info); give the host alone")
		case c == '/' || c == '\\':
			return Host{}, invalidHost(orig, "contains a path separator; give the host alone")
		case c == '%':
			return Host{}, invalidHost(orig, "contains '%' (a zone identifier or percent-encoding)")
		default:
			return Host{}, invalidHost(orig, fmt.Sprintf("contains %q, which no host name may hold", c))
		}
	}
	if !ascii {
		if !utf8.ValidString(s) {
			return Host{}, invalidHost(orig, "not valid UTF-8")
		}
		s = idnaDots.Replace(s)
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return Host{}, invalidHost(orig, "empty name")
	}
	labels := strings.Split(s, ".")
	for i, l := range labels {
		if l == "" {
			return Host{}, invalidHost(orig, "empty label (two dots in a row, or a leading dot)")
		}
		if needsIDNA(l) {
			a, err := idna.Lookup.ToASCII(l)
			if err != nil {
				return Host{}, invalidHost(orig, fmt.Sprintf("label %q is not a valid internationalised label: %v", l, err))
			}
			l = a
		} else {
			l = strings.ToLower(l)
		}
		labels[i] = l
	}
	name := strings.Join(labels, ".")
	if looksNumeric(labels[len(labels)-1]) {
		a, ok := parseIPv4Loose(name)
		if !ok {
			return Host{}, invalidHost(orig, "looks like an IPv4 address but is not a valid one")
		}
		return Host{Addr: a}, nil
	}
	if len(name) > maxNameLen {
		return Host{}, invalidHost(orig, fmt.Sprintf("name is %d bytes; DNS names are at most %d", len(name), maxNameLen))
	}
	for _, l := range labels {
		if !validLabel(l) {
			switch {
			case len(l) > maxLabelLen:
				return Host{}, invalidHost(orig, fmt.Sprintf("label %q is %d bytes; labels are at most %d", l, len(l), maxLabelLen))
			case strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-"):
				return Host{}, invalidHost(orig, fmt.Sprintf("label %q starts or ends with a hyphen", l))
			default:
				return Host{}, invalidHost(orig, fmt.Sprintf("label %q holds characters other than letters, digits, '-' and '_'", l))
			}
		}
	}
	return Host{Name: name}, nil
}

// needsIDNA reports whether a label has non-ASCII text or is a punycode label
// whose encoding must be checked.
func needsIDNA(l string) bool {
	if len(l) >= 4 && strings.EqualFold(l[:4], "xn--") {
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// parseIPv4Loose parses IPv4 the way URL parsers and inet_aton do: one to four
// dot-separated parts, each decimal, octal (leading 0) or hex (0x); the last
// part fills the remaining bytes.
func parseIPv4Loose(s string) (netip.Addr, bool) {
	var parts [4]uint64
	n := 0
	for {
		i := strings.IndexByte(s, '.')
		part := s
		if i >= 0 {
			part = s[:i]
		}
		if n == 4 {
			return netip.Addr{}, false
		}
		v, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
		if i < 0 {
			break
		}
		s = s[i+1:]
	}
	var v uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 255 {
			return netip.Addr{}, false
		}
		v = v<<8 | parts[i]
	}
	rest := uint(8 * (5 - n))
	last := parts[n-1]
	if last >= 1<<rest {
		return netip.Addr{}, false
	}
	v = v<<rest | last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // "0x" alone is zero, as URL parsers read it
		}
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	// Leading zeros are harmless; anything longer than 32 bits is not.
	p = strings.TrimLeft(p, "0")
	if p == "" {
		return 0, true
	}
	if len(p) > 11 {
		return 0, false
	}
	v, err := strconv.ParseUint(p, base, 64)
	if err != nil || v > 0xffffffff {
		return 0, false
	}
	return v, true
}

// SplitTarget splits a destination as clients write it: "host", "host:port",
// "[v6]", "[v6]:port" or a bare IPv6 address, and canonicalises the host. When
// no port is written, defaultPort is returned. A written port must be decimal
// and in 1..65535.
func SplitTarget(s string, defaultPort uint16) (Host, uint16, error) {
	host, portText := s, ""
	hasPort := false
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Host{}, 0, invalidHost(s, "bracketed address without closing ']'")
		}
		host = s[:end+1]
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portText, hasPort = rest[1:], true
		default:
			return Host{}, 0, invalidHost(s, fmt.Sprintf("unexpected %q after ']'", rest))
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		host, portText, hasPort = s[:i], s[i+1:], true
	}
	port := defaultPort
	if hasPort {
		p, err := parsePort(portText)
		if err != nil {
			return Host{}, 0, fmt.Errorf("%w %q: %v", ErrInvalidHost, s, err)
		}
		port = p
	}
	h, err := CanonicalHost(host)
	if err != nil {
		return Host{}, 0, err
	}
	return h, port, nil
}

var errPortRange = errors.New("port must be a number from 1 to 65535")

func parsePort(s string) (uint16, error) {
	digits := strings.TrimLeft(s, "0")
	if s == "" || len(digits) > 5 {
		return 0, fmt.Errorf("port %q: %w", s, errPortRange)
	}
	v := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q: %w", s, errPortRange)
		}
		v = v*10 + int(c-'0')
	}
	if v < 1 || v > 65535 {
		return 0, fmt.Errorf("port %q: %w", s, errPortRange)
	}
	return uint16(v), nil
}
