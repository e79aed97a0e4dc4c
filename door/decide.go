package door

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/postern-dev/postern/door/policy"
)

// Judgement is the door's answer for one destination: the decision and, when it
// admits, the addresses that were checked and may be dialled (and no others).
type Judgement struct {
	Host     policy.Host
	Port     uint16
	Decision policy.Decision
	// Addrs are the checked addresses, in dial order; empty on deny.
	Addrs []netip.Addr
	// Addr is the address that decided a deny (a resolved address the floor or
	// the policy forbids), or the address dialled once a connection is made.
	Addr netip.Addr

	// as is the gateway client judged, by its own policy (nil: the door's
	// policy); took is how long that judgement took.
	as   *Client
	took time.Duration
}

// Allowed reports whether the judgement admits the destination.
func (j Judgement) Allowed() bool { return j.Decision.Verdict == policy.Allow }

// errNoSuchHost is a lookup that found no address.
var errNoSuchHost = errors.New("no such host")

// Decide judges one destination in the door's order: the name first (a denied
// name is never resolved, by anyone), then every address it resolves to (pins
// first, then cfg.Resolver or the system resolver). One forbidden address denies
// the whole name, so a rebinding answer cannot slip a private address in beside a
// public one. A literal address is judged on itself.
func (d *Door) Decide(ctx context.Context, h policy.Host, port uint16) Judgement {
	return d.decide(ctx, d.policy(), h, port)
}

// decide is Decide by pol.
func (d *Door) decide(ctx context.Context, pol *policy.Policy, h policy.Host, port uint16) Judgement {
	j := Judgement{Host: h, Port: port}
	if h.Addr.IsValid() {
		a := h.Addr.Unmap()
		if g, _ := pol.GuardrailAt(a); g != nil {
			return guardrailJudgement(j, g)
		}
		j.Decision = pol.DecideAddr(a, port, "")
		if j.Allowed() {
			j.Addrs = []netip.Addr{a}
		} else {
			j.Addr = a
		}
		return j
	}
	if h.Name == "" {
		j.Decision = policy.Decision{Verdict: policy.Deny, Reason: "empty host"}
		return j
	}
	j.Decision = pol.DecideName(h.Name, port)
	if !j.Allowed() {
		return j
	}
	nameDecision := j.Decision
	addrs, err := d.resolve(ctx, h.Name)
	if err != nil {
		j.Decision = policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("cannot resolve %s: %v", h.Name, err), Rule: nameDecision.Rule}
		return j
	}
	wouldDeny := nameDecision.WouldDeny
	var checked []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		ad := pol.DecideAddr(a, port, h.Name)
		if ad.Verdict != policy.Allow {
			j.Decision = ad
			j.Addr = a
			return j
		}
		wouldDeny = wouldDeny || ad.WouldDeny
		checked = append(checked, a)
	}
	j.Decision = nameDecision
	j.Decision.WouldDeny = wouldDeny
	j.Addrs = checked
	return j
}

// resolve returns the addresses of an admitted canonical name: its pins if it
// has any, else what the lookup finds.
func (d *Door) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	if pinned, ok := d.cfg.AddHosts[name]; ok {
		return pinned, nil
	}
	addrs, err := d.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errNoSuchHost
	}
	return addrs, nil
}

// systemLookup asks the system resolver.
func systemLookup(ctx context.Context, name string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
}

// dnsLookup asks one DNS server (host:port) for A and AAAA records, over UDP and
// over TCP when an answer is truncated. It never consults the system resolver.
func dnsLookup(server string, timeout time.Duration) func(context.Context, string) ([]netip.Addr, error) {
	return func(ctx context.Context, name string) ([]netip.Addr, error) {
		var (
			out  []netip.Addr
			errs []error
		)
		found := false
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			addrs, err := exchange(ctx, server, name, qt, timeout)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			found = true
			out = append(out, addrs...)
		}
		if len(out) == 0 {
			if !found {
				return nil, errors.Join(errs...)
			}
			return nil, errNoSuchHost
		}
		return out, nil
	}
}

func exchange(ctx context.Context, server, name string, qtype uint16, timeout time.Duration) ([]netip.Addr, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: timeout}
	r, _, err := c.ExchangeContext(ctx, m, server)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, server)
	}
	if err != nil {
		return nil, fmt.Errorf("ask %s for %s %s: %w", server, name, dns.TypeToString[qtype], err)
	}
	switch r.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return nil, errNoSuchHost
	default:
		return nil, fmt.Errorf("ask %s for %s %s: %s", server, name, dns.TypeToString[qtype], dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A); ok {
				out = append(out, a.Unmap())
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(rr.AAAA); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// hostString is how a host is written in events and messages.
func hostString(h policy.Host) string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return h.Name
}

// targetString is host:port, with IPv6 in brackets.
func targetString(h policy.Host, port uint16) string {
	if h.Addr.IsValid() {
		return netip.AddrPortFrom(h.Addr, port).String()
	}
	return net.JoinHostPort(h.Name, fmt.Sprint(port))
}

// sameHost reports whether two canonical hosts are the same.
func sameHost(a, b policy.Host) bool {
	if a.Addr.IsValid() || b.Addr.IsValid() {
		return a.Addr.IsValid() && b.Addr.IsValid() && a.Addr.Unmap() == b.Addr.Unmap()
	}
	return a.Name != "" && strings.EqualFold(a.Name, b.Name)
}

// guardrailJudgement admits a connection to the address the door hands the
// run for guardrail g, to g's own address on this machine: the one, explicit
// way a run reaches a loopback address. Only g's port leads there.
func guardrailJudgement(j Judgement, g *policy.Guardrail) Judgement {
	if j.Port != g.Address.Port() {
		j.Decision = policy.Decision{Verdict: policy.Deny, Floor: true, Rule: fmt.Sprintf("guardrail %q", g.Name),
			Reason: fmt.Sprintf("guardrail %s listens on port %d, not %d", g.Name, g.Address.Port(), j.Port)}
		return j
	}
	j.Decision = policy.Decision{Verdict: policy.Allow, Rule: fmt.Sprintf("guardrail %q", g.Name),
		Reason: "the run's way to guardrail " + g.Name}
	j.Addrs = []netip.Addr{g.Address.Addr()}
	return j
}
