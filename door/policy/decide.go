package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Decision reasons that are not floor reasons. They are stable phrases.
const (
	ReasonAllowedByRule  = "allowed by rule"
	ReasonDeniedByRule   = "denied by rule"
	ReasonNoAllowRule    = "no allow rule matches"
	ReasonInvalidHost    = "invalid host"
	ReasonAllowedByCIDR  = "allowed by allow_cidrs"
	ReasonPrivate        = "private address not in allow_cidrs"
	ReasonResolvedOfName = "resolved address of allowed name"
	ReasonAddrNotAllowed = "address not in allow_cidrs"
)

// DefaultPorts are the ports a policy sends to the door when it names none.
var DefaultPorts = []uint16{80, 443}

// Nothing is the policy used when none is given: enforce, the default ports,
// no rules. It allows nothing.
func Nothing() *Policy {
	return &Policy{
		Source: "(no policy: allows nothing)",
		Mode:   Enforce,
		Ports:  slices.Clone(DefaultPorts),

		Writable:  slices.Clone(DefaultWritable),
		DenyRead:  slices.Clone(DefaultDenyRead),
		AllowRead: slices.Clone(DefaultAllowRead),
		PidsLimit: DefaultPidsLimit,
	}
}

// WithSelf returns a copy of p whose DecideAddr also floors addrs, with reason
// "hard floor: the door's own address". The door passes the addresses it
// listens on, so that no run can reach the door's other services through it.
// The copy shares p's rules; p is not changed.
func (p *Policy) WithSelf(addrs ...netip.Addr) *Policy {
	c := *p
	c.self = make([]netip.Addr, 0, len(p.self)+len(addrs))
	c.self = append(c.self, p.self...)
	for _, a := range addrs {
		if a.IsValid() {
			c.self = append(c.self, a.WithZone("").Unmap())
		}
	}
	return &c
}

// Matches reports whether the rule covers the canonical name on port. A rule
// covers its name and every subdomain; a wildcard rule only the subdomains. A
// rule without a port covers any port (the caller checks the policy's ports).
func (r *HostRule) Matches(name string, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	n, rn := len(name), len(r.Name)
	switch {
	case n == rn:
		return !r.Wildcard && name == r.Name
	case n > rn:
		return name[n-rn-1] == '.' && name[n-rn:] == r.Name
	}
	return false
}

// label is the rule as Decision.Rule reports it: "text (file:line:col)".
func (r *HostRule) label() string {
	if r.ref != "" {
		return r.ref
	}
	return ruleRef(r.Text, r.Pos)
}

func (r *CIDRRule) label() string {
	if r.ref != "" {
		return r.ref
	}
	text := r.Text
	if text == "" {
		text = r.Prefix.String()
	}
	return ruleRef(text, r.Pos)
}

func ruleRef(text, pos string) string {
	if pos == "" {
		return text
	}
	return text + " (" + pos + ")"
}

// PortAllowed reports whether port is in the policy's ports.
func (p *Policy) PortAllowed(port uint16) bool {
	return slices.Contains(p.Ports, port)
}

func portReason(port uint16) string {
	return "port " + strconv.Itoa(int(port)) + " is not in the policy's ports"
}

// observe turns an enforce decision into what p's mode makes of it: observe
// mode allows every denial except the floor's, and marks it.
func (p *Policy) observe(d Decision) Decision {
	if p.Mode == Observe && d.Verdict == Deny && !d.Floor && !d.Sealed {
		d.Verdict = Allow
		d.WouldDeny = true
	}
	return d
}

// DecideName judges a destination by its name alone, before anything is
// resolved: a deny rule wins; then the port must be in the policy's ports;
// then an allow rule must cover the name on that port. In observe mode every
// denial becomes an allow with WouldDeny set.
//
// name should be canonical (see CanonicalHost); any other spelling is
// canonicalised first, an invalid one is denied, and an IP literal is judged
// by DecideAddr as a literal.
func (p *Policy) DecideName(name string, port uint16) Decision {
	return p.observe(p.decideName(name, port))
}

func (p *Policy) decideName(name string, port uint16) Decision {
	if !isCanonicalName(name) {
		h, err := CanonicalHost(name)
		switch {
		case err != nil:
			return Decision{Verdict: Deny, Reason: ReasonInvalidHost}
		case h.IsAddr():
			return p.decideAddr(h.Addr, port, "")
		}
		name = h.Name
	}
	if d, ok := p.sealDecision(name); ok {
		return d
	}
	for i := range p.Deny {
		if p.Deny[i].Matches(name, port) {
			return Decision{Verdict: Deny, Reason: ReasonDeniedByRule, Rule: p.Deny[i].label()}
		}
	}
	if !p.PortAllowed(port) {
		return Decision{Verdict: Deny, Reason: portReason(port)}
	}
	for i := range p.Allow {
		if p.Allow[i].Matches(name, port) {
			return Decision{Verdict: Allow, Reason: ReasonAllowedByRule, Rule: p.Allow[i].label()}
		}
	}
	return Decision{Verdict: Deny, Reason: ReasonNoAllowRule}
}

// DecideAddr judges one address. With name == "" the address is a literal the
// client asked for; otherwise it is an address name resolved to, and name is
// judged again first (so a caller cannot skip that step).
//
// The hard floor comes first and holds in observe mode too. Then the port must
// be in the policy's ports. An allow_cidrs entry containing the address (or
// the IPv4 address it carries) allows it. A private address no entry contains
// is denied: a name never opens one. A public address of an admitted name is
// allowed; a literal no entry contains is denied.
func (p *Policy) DecideAddr(a netip.Addr, port uint16, name string) Decision {
	return p.observe(p.decideAddr(a, port, name))
}

func (p *Policy) decideAddr(a netip.Addr, port uint16, name string) Decision {
	a = a.WithZone("").Unmap()
	if r, ok := p.floor(a); ok {
		return Decision{Verdict: Deny, Reason: r, Floor: true}
	}
	var byName Decision
	if name != "" {
		byName = p.decideName(name, port)
		if byName.Verdict != Allow {
			return byName
		}
	}
	if !p.PortAllowed(port) {
		return Decision{Verdict: Deny, Reason: portReason(port)}
	}
	if r := p.cidrFor(a); r != nil {
		return Decision{Verdict: Allow, Reason: ReasonAllowedByCIDR, Rule: r.label()}
	}
	if isPrivate(a) {
		return Decision{Verdict: Deny, Reason: ReasonPrivate}
	}
	if name != "" {
		return Decision{Verdict: Allow, Reason: ReasonResolvedOfName, Rule: byName.Rule}
	}
	return Decision{Verdict: Deny, Reason: ReasonAddrNotAllowed}
}

// floor is Floor plus the door's own addresses, judged through any IPv4
// address a carries as well.
func (p *Policy) floor(a netip.Addr) (string, bool) {
	if r, ok := Floor(a); ok {
		return r, true
	}
	if len(p.self) == 0 {
		return "", false
	}
	dst, other := embedded(a)
	for _, s := range p.self {
		if s == a || s == dst || s == other {
			return reasonSelf, true
		}
	}
	return "", false
}

// cidrFor returns the first allow_cidrs entry containing a, the address that
// would be dialled. An IPv6 address carrying an IPv4 one (6to4, NAT64,
// IPv4-compatible, SIIT, Teredo) is judged by that IPv4 address for the
// floor and for being private, but it is opened only by a CIDR holding the
// IPv6 address itself: a packet to it goes where this host routes IPv6 (a
// 6to4 relay, a NAT64 gateway), not to the IPv4 address a CIDR opened. (An
// IPv4-mapped address is unmapped before this and dialled as IPv4.)
func (p *Policy) cidrFor(a netip.Addr) *CIDRRule {
	for i := range p.AllowCIDRs {
		if p.AllowCIDRs[i].Prefix.Contains(a) {
			return &p.AllowCIDRs[i]
		}
	}
	return nil
}

// Suggest returns the policy text that would allow h on port, for a denial
// message: `allow = ["evil.test:443"]` for a name, `allow_cidrs =
// ["10.9.0.7/32"]` for an address, preceded by a `ports = [...]` line when the
// port is not in the policy's ports (the lines are separated by "\n"). Each
// line is a whole attribute: where the policy already sets it, the quoted
// entry goes into the existing list. It
// returns "" when no policy can allow it: the hard floor, an invalid host or
// port, or a name a deny rule covers (a deny is a deliberate choice, and the
// suggestion is not to undo it).
func (p *Policy) Suggest(h Host, port uint16) string {
	if port == 0 {
		return ""
	}
	var line string
	switch {
	case h.Name != "":
		c, err := CanonicalHost(h.Name)
		if err != nil || c.IsAddr() {
			return ""
		}
		for i := range p.Deny {
			if p.Deny[i].Matches(c.Name, port) {
				return ""
			}
		}
		line = `allow = ["` + c.Name + ":" + strconv.Itoa(int(port)) + `"]`
	case h.Addr.IsValid():
		a := h.Addr.WithZone("").Unmap()
		if _, ok := p.floor(a); ok {
			return ""
		}
		if dst, _ := embedded(a); dst.IsValid() {
			a = dst
		}
		line = `allow_cidrs = ["` + netip.PrefixFrom(a, a.BitLen()).String() + `"]`
	default:
		return ""
	}
	if p.PortAllowed(port) {
		return line
	}
	return PortsLine(append(slices.Clone(p.Ports), port)) + "\n" + line
}

// PortsLine is the policy line `ports = [...]` for ports, sorted, each once.
func PortsLine(ports []uint16) string {
	slices.Sort(ports)
	ports = slices.Compact(ports)
	var b strings.Builder
	b.WriteString("ports = [")
	for i, pt := range ports {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(int(pt)))
	}
	b.WriteString("]")
	return b.String()
}
