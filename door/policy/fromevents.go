package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/internal/termtext"
)

// destUse is what a run did with one destination (a name or an address).
type destUse struct {
	ports       map[uint16]bool
	connections int
	via         []string // for an address: the names that led to it
}

func (u *destUse) add(port uint16) {
	u.ports[port] = true
	u.connections++
}

func useOf[K comparable](m map[K]*destUse, k K) *destUse {
	u := m[k]
	if u == nil {
		u = &destUse{ports: map[uint16]bool{}}
		m[k] = u
	}
	return u
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// Origin is the run a policy is written from, named in its header.
type Origin struct {
	Run, Machine string
	Mode         string // the run's policy's mode
	Command      []string
	At           time.Time // when the policy is written
}

// FromEvents writes the enforce policy allowing what a run's events show it
// reached: its names, the addresses it reached by number (as allow_cidrs),
// the ports it used; what it was refused is listed in comments, not allowed.
func FromEvents(from Origin, evs []event.Event) string {
	names := map[string]*destUse{}
	addrs := map[netip.Addr]*destUse{}
	ports := map[uint16]bool{}
	var refused, deny []string
	seenRefused := map[string]bool{}
	for _, ev := range evs {
		// A request inside an inspected connection is not a destination:
		// its connection's own decision is.
		if ev.Event != event.Decided || ev.Host == "" || ev.Kind == event.Request {
			continue
		}
		// A lookup admitted is not yet a connection: what the run reached is
		// in the connections' decisions. A lookup refused is kept below.
		if ev.Kind == event.DNS && ev.Decision == event.Allow && !ev.WouldDeny {
			continue
		}
		target := ev.Host
		if ev.Port != 0 {
			target += ":" + strconv.Itoa(int(ev.Port))
		}
		// Under observe a name the policy's deny rules cover was let through;
		// the deny was the person's choice, so it stays refused.
		deniedByRule := strings.HasPrefix(ev.Reason, ReasonDeniedByRule)
		if deniedByRule {
			if _, err := netip.ParseAddr(ev.Host); err != nil {
				deny = appendNew(deny, ev.Host)
			}
		}
		if ev.Decision != event.Allow || deniedByRule {
			if !seenRefused[target] {
				seenRefused[target] = true
				// Written in a comment, so on one line: the run chose the
				// target and much of the reason (a malformed target, a TLS
				// server_name), and a line break would start a policy line.
				refused = append(refused, fmt.Sprintf("%s (%s: %s)", termtext.Printable(target), ev.Kind, termtext.Printable(ev.Reason)))
			}
			continue
		}
		if ev.Kind == event.DNS || ev.Port == 0 {
			continue // a lookup enforce would refuse, let through: its connection says the rest
		}
		ports[ev.Port] = true
		if a, err := netip.ParseAddr(ev.Host); err == nil {
			useOf(addrs, a.Unmap()).add(ev.Port)
			continue
		}
		useOf(names, ev.Host).add(ev.Port)
		// A name that led to a private address needs the address opened too.
		if a, err := netip.ParseAddr(ev.Addr); err == nil && Private(a) {
			u := useOf(addrs, a.Unmap())
			u.add(ev.Port)
			u.via = appendNew(u.via, ev.Host)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# Written by 'postern policy from-run %s' on %s from what the run reached\n", from.Run, from.At.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "# on machine %s (its policy's mode: %s): %s\n", from.Machine, orDash(from.Mode), termtext.Printable(strings.Join(from.Command, " ")))
	b.WriteString("# Review it before use: every entry below is something the run did.\n")
	b.WriteString("mode = \"enforce\"\n")

	portList := slices.Collect(maps.Keys(ports))
	if len(portList) == 0 {
		portList = slices.Clone(DefaultPorts)
	}
	b.WriteString(PortsLine(portList) + "\n")

	// A name already covered by a listed parent name (api.example.com under
	// example.com) adds nothing.
	keys := make([]string, 0, len(names))
	for n := range names {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	var allow []string
	for _, n := range keys {
		covered := false
		for _, p := range keys {
			if p != n && strings.HasSuffix(n, "."+p) {
				covered = true
				break
			}
		}
		if !covered {
			allow = append(allow, n)
		}
	}
	b.WriteString("allow = [\n")
	for _, n := range allow {
		u := names[n]
		for _, c := range keys {
			if c != n && strings.HasSuffix(c, "."+n) {
				u.connections += names[c].connections
				for p := range names[c].ports {
					u.ports[p] = true
				}
			}
		}
		fmt.Fprintf(&b, "  %q, # %s\n", n, useText(u))
	}
	b.WriteString("]\n")
	if len(deny) > 0 {
		slices.Sort(deny)
		b.WriteString("deny = [\n")
		for _, n := range deny {
			fmt.Fprintf(&b, "  %q, # denied by a rule of the run's policy\n", n)
		}
		b.WriteString("]\n")
	}

	if len(addrs) > 0 {
		as := make([]netip.Addr, 0, len(addrs))
		for a := range addrs {
			as = append(as, a)
		}
		slices.SortFunc(as, func(x, y netip.Addr) int { return x.Compare(y) })
		b.WriteString("allow_cidrs = [\n")
		for _, a := range as {
			how := "reached by number"
			if via := addrs[a].via; len(via) > 0 {
				how = "a private address " + strings.Join(via, ", ") + " led to"
			}
			fmt.Fprintf(&b, "  %q, # %s: %s\n", netip.PrefixFrom(a, a.BitLen()).String(), how, useText(addrs[a]))
		}
		b.WriteString("]\n")
	}
	if len(refused) > 0 {
		b.WriteString("\n# Refused during the run, not allowed above:\n")
		for _, r := range refused {
			fmt.Fprintf(&b, "#   %s\n", r)
		}
	}
	return b.String()
}

func useText(u *destUse) string {
	ps := make([]int, 0, len(u.ports))
	for p := range u.ports {
		ps = append(ps, int(p))
	}
	slices.Sort(ps)
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	conns, port := "connections", "port"
	if u.connections == 1 {
		conns = "connection"
	}
	if len(s) > 1 {
		port = "ports"
	}
	return fmt.Sprintf("%d %s, %s %s", u.connections, conns, port, strings.Join(s, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
