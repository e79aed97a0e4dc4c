package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Guardrail is a registered process outside the wall (an LLM gateway, a
// recorder) and the hosts it seals:
//
//	guardrail "model" {
//	  address = "127.0.0.1:4000"
//	  hosts   = ["api.anthropic.com", "api.openai.com"]
//	  env     = ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"]
//	}
//
// Where the seal is held, the sealed hosts are denied to the run whatever the
// rest of the policy says (observe mode included), and the run reaches the
// guardrail at the URL the door hands it; the door forwards those connections
// to Address on the run's machine.
type Guardrail struct {
	Name    string         // the block's label
	Address netip.AddrPort // where it listens on the run's machine
	Hosts   []HostRule     // sealed: a name covers itself and its subdomains
	Env     []string       // variables set, inside the run, to its URL
	Pos     string         // the block's label, "file:line:col"
}

// GuardrailIPv4 is the block of the fake range the door hands guardrails'
// addresses out of, one per guardrail in the policy's order: a connection
// there is forwarded to that guardrail and nowhere else. The DNS side never
// hands these out.
var GuardrailIPv4 = netip.MustParsePrefix("198.19.255.0/24")

// GuardrailAddr is where the run reaches its i-th guardrail.
func GuardrailAddr(i int) netip.Addr {
	b := GuardrailIPv4.Addr().As4()
	b[3] = byte(i + 1)
	return netip.AddrFrom4(b)
}

// URL is the guardrail's address as the run sees it: http://ADDR:PORT.
func (g *Guardrail) URL(i int) string {
	return "http://" + netip.AddrPortFrom(GuardrailAddr(i), g.Address.Port()).String()
}

// EnvName is POSTERN_GUARDRAIL_<NAME>_URL, the variable that always holds the
// guardrail's URL inside the run.
func (g *Guardrail) EnvName() string {
	return "POSTERN_GUARDRAIL_" + strings.ToUpper(strings.ReplaceAll(g.Name, "-", "_")) + "_URL"
}

// label is how decisions cite the guardrail.
func (g *Guardrail) label() string { return fmt.Sprintf("guardrail %q (%s)", g.Name, g.Pos) }

// Sealing is a copy of p whose guardrails' hosts are sealed: denied, with a
// reason naming the guardrail, whatever else the policy says.
func (p *Policy) Sealing() *Policy {
	c := *p
	c.sealed = len(p.Guardrails) > 0
	return &c
}

// Sealed reports whether the seal is held in this policy's decisions.
func (p *Policy) Sealed() bool { return p.sealed }

// SealedBy returns the guardrail whose hosts cover the canonical name, and its
// index, or nil.
func (p *Policy) SealedBy(name string) (*Guardrail, int) {
	for i := range p.Guardrails {
		g := &p.Guardrails[i]
		for j := range g.Hosts {
			if g.Hosts[j].Matches(name, 0) {
				return g, i
			}
		}
	}
	return nil, -1
}

// Guardrail returns the guardrail the run reaches at a, or nil.
func (p *Policy) GuardrailAt(a netip.Addr) (*Guardrail, int) {
	a = a.Unmap()
	if !GuardrailIPv4.Contains(a) {
		return nil, -1
	}
	i := int(a.As4()[3]) - 1
	if i < 0 || i >= len(p.Guardrails) {
		return nil, -1
	}
	return &p.Guardrails[i], i
}

// sealDecision is the denial of a name a guardrail seals.
func (p *Policy) sealDecision(name string) (Decision, bool) {
	if !p.sealed {
		return Decision{}, false
	}
	g, i := p.SealedBy(name)
	if g == nil {
		return Decision{}, false
	}
	how := g.URL(i)
	if len(g.Env) > 0 {
		how = "$" + g.Env[0]
	}
	return Decision{Verdict: Deny, Sealed: true, Rule: g.label(),
		Reason: fmt.Sprintf("%s is sealed: reach it through guardrail %s at %s", name, g.Name, how)}, true
}

var (
	guardrailNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`) })
	envNameRE       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	guardrailAttrs  = []string{"address", "hosts", "env"}
)

// guardrail compiles one guardrail block.
func (c *compiler) guardrail(blk *hclsyntax.Block) {
	if len(blk.Labels) != 1 {
		r := blk.TypeRange
		if len(blk.Labels) > 1 {
			r = blk.LabelRanges[1]
		}
		c.errorf(r, "a guardrail block has one name",
			`write guardrail "model" { address = "127.0.0.1:4000"  hosts = ["api.anthropic.com"] }`)
		return
	}
	g := Guardrail{Name: blk.Labels[0], Pos: posString(blk.LabelRanges[0])}
	if !guardrailNameRE().MatchString(g.Name) {
		c.errorf(blk.LabelRanges[0], fmt.Sprintf("invalid guardrail name %q", g.Name),
			"a guardrail's name is 1 to 32 lowercase letters, digits, '-' or '_', starting with a letter, as in guardrail \"model\"")
		return
	}
	for _, prev := range c.p.Guardrails {
		if prev.Name == g.Name {
			c.errorf(blk.LabelRanges[0], fmt.Sprintf("a second guardrail %q", g.Name), "the first is at %s; give each guardrail its own name", prev.Pos)
			return
		}
	}
	if len(c.p.Guardrails) >= 254 {
		c.errorf(blk.LabelRanges[0], "too many guardrails", "a policy registers at most 254")
		return
	}
	for _, inner := range blk.Body.Blocks {
		c.errorf(inner.TypeRange, fmt.Sprintf("unexpected block %q in guardrail", inner.Type),
			"a guardrail block has only the attributes %s", strings.Join(guardrailAttrs, ", "))
	}
	var hasAddr, hasHosts bool
	attrs := make([]*hclsyntax.Attribute, 0, len(blk.Body.Attributes))
	for _, a := range blk.Body.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	for _, a := range attrs {
		switch a.Name {
		case "address":
			s, ok := c.str(a)
			if !ok {
				continue
			}
			ap, err := netip.ParseAddrPort(s)
			switch {
			case err != nil:
				c.errorf(a.Expr.Range(), fmt.Sprintf("invalid guardrail address %q", s),
					"write the address and port it listens on, on the run's machine, as in address = \"127.0.0.1:4000\" (an IPv6 address in brackets: \"[::1]:4000\")")
				continue
			case ap.Port() == 0:
				c.errorf(a.Expr.Range(), fmt.Sprintf("invalid guardrail address %q", s), "give the port it listens on, not 0")
				continue
			}
			g.Address = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			hasAddr = true
		case "hosts":
			texts, ranges := c.strElems(a, `"api.anthropic.com", "api.openai.com"`)
			for i, text := range texts {
				r, summary, detail := c.hostRule("hosts", text, false)
				if summary == "" && r.Port != 0 {
					summary, detail = fmt.Sprintf("invalid hosts entry %q", text), fmt.Sprintf("a guardrail seals a host on every port; write %q", r.Name)
				}
				if summary == "" && r.Wildcard {
					summary, detail = fmt.Sprintf("invalid hosts entry %q", text), fmt.Sprintf("a name covers its subdomains already; write %q", r.Name)
				}
				if summary != "" {
					c.errorf(ranges[i], summary, "%s", detail)
					continue
				}
				r.Pos = posString(ranges[i])
				r.ref = ruleRef(r.Text, r.Pos)
				g.Hosts = append(g.Hosts, r)
			}
			hasHosts = true
		case "env":
			names, ranges := c.strElems(a, `"ANTHROPIC_BASE_URL"`)
			for i, n := range names {
				if !envNameRE().MatchString(n) || strings.HasPrefix(n, "POSTERN_") {
					c.errorf(ranges[i], fmt.Sprintf("invalid env entry %q", n),
						"name an environment variable the agent reads its model's URL from, as in \"ANTHROPIC_BASE_URL\" (POSTERN_ names are postern's own)")
					continue
				}
				g.Env = append(g.Env, n)
			}
		default:
			detail := "a guardrail block has only " + strings.Join(guardrailAttrs, ", ")
			if near := nearest(a.Name, guardrailAttrs); near != "" {
				detail = "did you mean " + near + "? " + detail
			}
			c.errorf(a.NameRange, fmt.Sprintf("unknown attribute %q in guardrail", a.Name), "%s", detail)
		}
	}
	if !hasAddr {
		c.errorf(blk.TypeRange, fmt.Sprintf("guardrail %q has no address", g.Name),
			`say where it listens on the run's machine, as in address = "127.0.0.1:4000"`)
	}
	if !hasHosts || len(g.Hosts) == 0 {
		c.errorf(blk.TypeRange, fmt.Sprintf("guardrail %q seals no host", g.Name),
			`list the hosts only it may reach, as in hosts = ["api.anthropic.com"]`)
	}
	c.p.Guardrails = append(c.p.Guardrails, g)
}
