package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Spec is a policy as plain values: what an HCL policy file says, for callers
// that build or change a policy without a file (the gateway's API). FromSpec
// compiles it with the same checks and the same words as Parse; Policy.Spec
// gives it back.
type Spec struct {
	Name       string   `json:"name,omitempty"`
	Mode       string   `json:"mode"`  // "enforce" or "observe"; "" is enforce
	Ports      []uint16 `json:"ports"` // nil or empty: DefaultPorts
	Allow      []string `json:"allow"`
	Deny       []string `json:"deny"`
	AllowCIDRs []string `json:"allow_cidrs"`
}

// SpecProblem is one thing wrong with a Spec: which entry, what is wrong with
// it, and what to write instead.
type SpecProblem struct {
	Field   string `json:"field"`           // "allow", "deny", "allow_cidrs", "mode", "ports"
	Index   int    `json:"index"`           // the entry's index in its list; -1 for the field as a whole
	Value   string `json:"value,omitempty"` // the entry as given
	Summary string `json:"summary"`
	Fix     string `json:"fix"`
}

func (p SpecProblem) String() string {
	where := p.Field
	if p.Index >= 0 {
		where += "[" + strconv.Itoa(p.Index) + "]"
	}
	if p.Value != "" {
		where += " " + strconv.Quote(p.Value)
	}
	return where + ": " + p.Summary + "; " + p.Fix
}

// SpecError is a Spec that could not be compiled; it lists every problem.
type SpecError struct {
	Source   string
	Problems []SpecProblem
}

func (e *SpecError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.Source != "" {
			b.WriteString(e.Source)
			b.WriteString(": ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// FromSpec compiles s as Parse compiles a file: the same rules, the same
// checks (a URL, a bare "*", an address in allow, an allow port missing from
// ports, a range inside the hard floor are each refused with what to write
// instead). source names the policy in decisions and denials. Every problem is
// reported at once, in a *SpecError. Rules carry no file position: a
// decision's Rule is the entry's text.
func FromSpec(source string, s Spec) (*Policy, error) {
	c := compiler{p: &Policy{Source: source, Name: s.Name, Mode: Enforce}}
	var probs []SpecProblem
	add := func(field string, i int, value, summary, fix string) {
		probs = append(probs, SpecProblem{Field: field, Index: i, Value: value, Summary: summary, Fix: fix})
	}
	switch s.Mode {
	case "", "enforce":
	case "observe":
		c.p.Mode = Observe
	default:
		add("mode", -1, s.Mode, fmt.Sprintf("unknown mode %q", s.Mode),
			`write "enforce" (refuse what the policy denies) or "observe" (allow, and record what enforce would deny)`)
	}
	if len(s.Ports) == 0 {
		c.p.Ports = slices.Clone(DefaultPorts)
	} else {
		for i, p := range s.Ports {
			if p == 0 {
				add("ports", i, "0", "invalid port", "a port is a whole number from 1 to 65535, as in [80, 443]")
			}
		}
		c.p.Ports = slices.Clone(s.Ports)
		slices.Sort(c.p.Ports)
		c.p.Ports = slices.Compact(c.p.Ports)
	}
	rules := func(field string, texts []string, isAllow bool) []HostRule {
		out := make([]HostRule, 0, len(texts))
		for i, text := range texts {
			r, summary, detail := c.hostRule(field, text, isAllow)
			if summary != "" {
				add(field, i, text, summary, detail)
				continue
			}
			r.ref = r.Text
			out = append(out, r)
		}
		return out
	}
	c.p.Allow = rules("allow", s.Allow, true)
	c.p.Deny = rules("deny", s.Deny, false)
	for i, text := range s.AllowCIDRs {
		r, detail := cidrRule(text)
		if detail != "" {
			add("allow_cidrs", i, text, fmt.Sprintf("invalid allow_cidrs entry %q", text), detail)
			continue
		}
		r.ref = r.Text
		c.p.AllowCIDRs = append(c.p.AllowCIDRs, r)
	}
	if len(probs) > 0 {
		return nil, &SpecError{Source: source, Problems: probs}
	}
	return c.p, nil
}

// Spec returns the policy as values, its rules as written: FromSpec of the
// result compiles to the same rules. The door's own addresses (WithSelf) are
// not part of it.
func (p *Policy) Spec() Spec {
	s := Spec{
		Name:       p.Name,
		Mode:       p.Mode.String(),
		Ports:      slices.Clone(p.Ports),
		Allow:      make([]string, 0, len(p.Allow)),
		Deny:       make([]string, 0, len(p.Deny)),
		AllowCIDRs: make([]string, 0, len(p.AllowCIDRs)),
	}
	for _, r := range p.Allow {
		s.Allow = append(s.Allow, r.Text)
	}
	for _, r := range p.Deny {
		s.Deny = append(s.Deny, r.Text)
	}
	for _, r := range p.AllowCIDRs {
		text := r.Text
		if text == "" {
			text = r.Prefix.String()
		}
		s.AllowCIDRs = append(s.AllowCIDRs, text)
	}
	return s
}

// OnFloor reports whether a is on the hard floor of this policy (the floor,
// and the door's own addresses given to WithSelf), and why. A door that
// sends its connections on to a gateway still refuses these itself.
func (p *Policy) OnFloor(a netip.Addr) (reason string, ok bool) {
	return p.floor(a.WithZone("").Unmap())
}
