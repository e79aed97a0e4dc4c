package policy

import (
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/postern-dev/postern/internal/hcldecode"
)

// ParseError is a policy that could not be compiled. Diags holds every problem
// found, each with the file, line and column it is about.
type ParseError struct {
	Filename string
	Diags    hcl.Diagnostics
}

// Error lists one problem per line: "file:line:col: summary; detail".
func (e *ParseError) Error() string { return hcldecode.Lines(e.Filename, e.Diags) }

// posString is where r starts, as "file:line:col".
var posString = hcldecode.Pos

// Load reads the policy file at path and compiles it.
func Load(path string) (*Policy, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy %q: %w", path, err)
	}
	return Parse(path, src)
}

// The attributes a policy may have, in the order errors list them.
var knownAttrs = []string{"name", "mode", "ports", "allow", "deny", "allow_cidrs", "writable", "deny_read", "allow_read", "pids_limit"}

// Parse compiles an HCL policy. filename is used in positions only. Every
// problem found is reported at once, in a *ParseError.
//
//	name        = "build agents"           # optional description
//	mode        = "enforce"                # or "observe"; default enforce
//	ports       = [80, 443]                # default [80, 443]
//	allow       = ["github.com", "registry.npmjs.org:443", "*.example.com"]
//	deny        = ["gist.github.com"]
//	allow_cidrs = ["10.20.0.0/16"]
//	writable    = ["~/.claude", "~/.claude.json"]  # see files.go
//	deny_read   = ["~/.config/vendor/token"]
//	allow_read  = ["~/.kube/config"]
//	pids_limit  = 4096
//
// A name in allow or deny covers itself and all its subdomains; "*.name"
// covers only the subdomains. "name:port" restricts a rule to one port, which
// for allow rules must be in ports. Deny wins over allow. Addresses are opened
// only by allow_cidrs, and never inside the hard floor. Blocks
//
//	inspect "api.github.com" { allow_methods = ["GET"] }
//
// name hosts whose requests are judged one by one (see InspectRule).
func Parse(filename string, src []byte) (*Policy, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, &ParseError{Filename: filename, Diags: diags}
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, &ParseError{Filename: filename, Diags: hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "not a native HCL policy",
		}}}
	}
	c := compiler{src: src, p: &Policy{Source: filename, Mode: Enforce}}
	var inspects, guardrails []*hclsyntax.Block
	for _, blk := range body.Blocks {
		switch blk.Type {
		case "inspect":
			inspects = append(inspects, blk)
			continue
		case "guardrail":
			guardrails = append(guardrails, blk)
			continue
		}
		c.errorf(blk.TypeRange, fmt.Sprintf("unexpected block %q", blk.Type),
			"a policy has inspect and guardrail blocks and the attributes %s; write for example allow = [\"github.com\"]", attrList())
	}
	attrs := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })

	var allow, deny, cidrs *hclsyntax.Attribute
	c.p.Ports = slices.Clone(DefaultPorts)
	c.p.Writable, c.p.DenyRead, c.p.AllowRead = slices.Clone(DefaultWritable), slices.Clone(DefaultDenyRead), slices.Clone(DefaultAllowRead)
	c.p.PidsLimit = DefaultPidsLimit
	for _, a := range attrs {
		switch a.Name {
		case "name":
			if s, ok := c.str(a); ok {
				c.p.Name = s
			}
		case "mode":
			c.mode(a)
		case "ports":
			c.ports(a)
		case "allow":
			allow = a
		case "deny":
			deny = a
		case "allow_cidrs":
			cidrs = a
		case "writable":
			c.p.Writable = c.pathRules(a, false)
		case "deny_read":
			c.p.DenyRead = append(c.p.DenyRead, c.pathRules(a, true)...)
		case "allow_read":
			c.p.AllowRead = append(c.p.AllowRead, c.pathRules(a, true)...)
		case "pids_limit":
			c.pidsLimit(a)
		default:
			c.unknown(a)
		}
	}
	// Host rules are checked against ports, so they come after it whatever
	// the order in the file.
	if allow != nil {
		c.p.Allow = c.hostRules(allow, true)
	}
	if deny != nil {
		c.p.Deny = c.hostRules(deny, false)
	}
	if cidrs != nil {
		c.cidrs(cidrs)
	}
	// An inspected host must be allowed: after the host rules.
	for _, blk := range inspects {
		c.inspect(blk)
	}
	for _, blk := range guardrails {
		c.guardrail(blk)
	}
	if c.diags.HasErrors() {
		slices.SortStableFunc(c.diags, func(a, b *hcl.Diagnostic) int {
			if a.Subject == nil || b.Subject == nil {
				return 0
			}
			return a.Subject.Start.Byte - b.Subject.Start.Byte
		})
		return nil, &ParseError{Filename: filename, Diags: c.diags}
	}
	return c.p, nil
}

type compiler struct {
	src   []byte
	p     *Policy
	diags hcl.Diagnostics
}

func (c *compiler) errorf(r hcl.Range, summary, detailFormat string, args ...any) {
	rr := r
	c.diags = append(c.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detailFormat, args...),
		Subject:  &rr,
	})
}

func attrList() string { return strings.Join(knownAttrs, ", ") }

func (c *compiler) unknown(a *hclsyntax.Attribute) {
	detail := "a policy has only " + attrList()
	if near := nearest(a.Name, knownAttrs); near != "" {
		detail = "did you mean " + near + "? " + detail
	}
	c.errorf(a.NameRange, fmt.Sprintf("unknown attribute %q", a.Name), "%s", detail)
}

// nearest returns the known word a misspelt one most likely meant, or "".
func nearest(w string, known []string) string {
	best, bestD := "", max(2, len(w)/3)+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(w), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return best
	}
	for _, k := range known {
		if len(w) >= 4 && (strings.Contains(k, strings.ToLower(w)) || strings.Contains(strings.ToLower(w), k)) {
			return k
		}
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// value evaluates an expression without variables or functions, turning a
// bare word (github.com without quotes) into an error that says to quote it.
func (c *compiler) value(e hclsyntax.Expression) (cty.Value, bool) {
	v, d := e.Value(nil)
	if d.HasErrors() {
		if _, ok := e.(*hclsyntax.ScopeTraversalExpr); ok {
			r := e.Range()
			text := string(r.SliceBytes(c.src))
			c.errorf(r, fmt.Sprintf("bare word %s", text), "write it in quotes: %q", text)
			return cty.NilVal, false
		}
		c.diags = append(c.diags, d...)
		return cty.NilVal, false
	}
	if v.IsNull() {
		c.errorf(e.Range(), "null value", "write a value, or leave the attribute out for its default")
		return cty.NilVal, false
	}
	return v, true
}

func (c *compiler) str(a *hclsyntax.Attribute) (string, bool) {
	v, ok := c.value(a.Expr)
	if !ok {
		return "", false
	}
	if v.Type() != cty.String {
		c.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a string", a.Name), "write %s = \"...\"", a.Name)
		return "", false
	}
	return v.AsString(), true
}

func (c *compiler) mode(a *hclsyntax.Attribute) {
	s, ok := c.str(a)
	if !ok {
		return
	}
	switch s {
	case "enforce":
		c.p.Mode = Enforce
	case "observe":
		c.p.Mode = Observe
	default:
		c.errorf(a.Expr.Range(), fmt.Sprintf("unknown mode %q", s),
			`write mode = "enforce" (refuse what the policy denies) or mode = "observe" (allow, and record what enforce would deny)`)
	}
}

// elems returns the expressions of a list attribute, or reports that it must
// be a list, showing the fix with example.
func (c *compiler) elems(a *hclsyntax.Attribute, example string) ([]hclsyntax.Expression, bool) {
	t, ok := a.Expr.(*hclsyntax.TupleConsExpr)
	if ok {
		return t.Exprs, true
	}
	fix := a.Name + " = [" + example + "]"
	if v, d := a.Expr.Value(nil); !d.HasErrors() && !v.IsNull() && v.Type().IsPrimitiveType() {
		switch v.Type() {
		case cty.String:
			fix = a.Name + " = [" + strconv.Quote(v.AsString()) + "]"
		case cty.Number:
			fix = a.Name + " = [" + v.AsBigFloat().Text('f', -1) + "]"
		}
	}
	c.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a list", a.Name), "write %s", fix)
	return nil, false
}

func (c *compiler) ports(a *hclsyntax.Attribute) {
	es, ok := c.elems(a, "80, 443")
	if !ok {
		return
	}
	if len(es) == 0 {
		c.errorf(a.Expr.Range(), "ports is empty",
			"the wall would send no TCP connection to the door and every one would be refused; write ports = [80, 443], or leave ports out for that default")
		return
	}
	var ports []uint16
	for _, e := range es {
		v, ok := c.value(e)
		if !ok {
			continue
		}
		if p, ok := portValue(v); ok {
			ports = append(ports, p)
			continue
		}
		c.errorf(e.Range(), "invalid port", "a port is a whole number from 1 to 65535, written without quotes, as in ports = [80, 443]")
	}
	slices.Sort(ports)
	c.p.Ports = slices.Compact(ports)
}

func portValue(v cty.Value) (uint16, bool) {
	if v.Type() != cty.Number {
		return 0, false
	}
	f := v.AsBigFloat()
	if !f.IsInt() || f.Cmp(big.NewFloat(1)) < 0 || f.Cmp(big.NewFloat(65535)) > 0 {
		return 0, false
	}
	n, _ := f.Int64()
	return uint16(n), true
}

// strElems evaluates a list of strings, reporting each element that is not one.
func (c *compiler) strElems(a *hclsyntax.Attribute, example string) (vals []string, ranges []hcl.Range) {
	es, ok := c.elems(a, example)
	if !ok {
		return nil, nil
	}
	for _, e := range es {
		v, ok := c.value(e)
		if !ok {
			continue
		}
		if v.Type() != cty.String {
			c.errorf(e.Range(), fmt.Sprintf("%s entries must be strings", a.Name), "write each in quotes, as in %s = [%s]", a.Name, example)
			continue
		}
		vals = append(vals, v.AsString())
		ranges = append(ranges, e.Range())
	}
	return vals, ranges
}

func (c *compiler) hostRules(a *hclsyntax.Attribute, isAllow bool) []HostRule {
	texts, ranges := c.strElems(a, `"github.com", "registry.npmjs.org:443"`)
	rules := make([]HostRule, 0, len(texts))
	for i, text := range texts {
		r, summary, detail := c.hostRule(a.Name, text, isAllow)
		if summary != "" {
			c.errorf(ranges[i], summary, "%s", detail)
			continue
		}
		r.Pos = posString(ranges[i])
		r.ref = ruleRef(r.Text, r.Pos)
		rules = append(rules, r)
	}
	return rules
}

// hostRule compiles one allow or deny entry, or returns what is wrong and
// what to write instead.
func (c *compiler) hostRule(attr, text string, isAllow bool) (r HostRule, summary, detail string) {
	r.Text = text
	bad := fmt.Sprintf("invalid %s entry %q", attr, text)
	s := text
	if t := strings.TrimSpace(s); t != s {
		return r, bad, fmt.Sprintf("remove the spaces around it: %q", t)
	}
	if s == "" {
		return r, fmt.Sprintf("empty %s entry", attr), `write a host name such as "github.com"`
	}
	if i := strings.Index(s, "://"); i >= 0 {
		host := s[i+3:]
		if j := strings.IndexAny(host, "/?#"); j >= 0 {
			host = host[:j]
		}
		if j := strings.LastIndexByte(host, '@'); j >= 0 {
			host = host[j+1:]
		}
		return r, bad, fmt.Sprintf("a rule names a host, not a URL; write %q", host)
	}
	if s == "*" || strings.HasPrefix(s, "*:") {
		if isAllow {
			return r, bad, `"*" would allow everything; to let everything through and record what enforce would deny, write mode = "observe"`
		}
		return r, bad, `"*" would deny everything, which a policy without allow rules already does; remove it`
	}
	if strings.HasPrefix(s, "*.") {
		r.Wildcard = true
		s = s[2:]
	}
	if strings.IndexByte(s, '*') >= 0 {
		return r, bad, `a wildcard may only be the whole first label, as in "*.example.com" (the subdomains only); "example.com" covers the name and all its subdomains`
	}
	if strings.IndexAny(s, "/?#") >= 0 {
		host := s[:strings.IndexAny(s, "/?#")]
		return r, bad, fmt.Sprintf("a rule names a host, not a path; write %q", host)
	}
	h, port, err := SplitTarget(s, 0)
	if err != nil {
		return r, bad, fmt.Sprintf("%v; write a host name such as \"github.com\", optionally with a port: \"github.com:443\"", err)
	}
	if h.IsAddr() {
		if reason, floored := Floor(h.Addr); floored {
			return r, bad, fmt.Sprintf("%s is an IP address in the hard floor (%s), which no policy can open; remove it",
				h.Addr, strings.TrimPrefix(reason, "hard floor: "))
		}
		cidr := netip.PrefixFrom(h.Addr, h.Addr.BitLen()).String()
		if isAllow {
			return r, bad, fmt.Sprintf("%s is an IP address and allow takes names; to open an address write allow_cidrs = [%q]", h.Addr, cidr)
		}
		return r, bad, fmt.Sprintf("%s is an IP address and deny takes names; an address is denied unless allow_cidrs contains it, so remove it here (and narrow allow_cidrs if it covers %s)", h.Addr, cidr)
	}
	r.Name, r.Port = h.Name, port
	if isAllow && port != 0 && !slices.Contains(c.p.Ports, port) {
		with := PortsLine(append(slices.Clone(c.p.Ports), port))
		return r, fmt.Sprintf("port %d of allow entry %q is not in ports", port, text),
			fmt.Sprintf("the wall sends only the ports listed there to the door, so a connection to port %d never reaches it; add the port: %s", port, with)
	}
	return r, "", ""
}

func (c *compiler) cidrs(a *hclsyntax.Attribute) {
	texts, ranges := c.strElems(a, `"10.20.0.0/16"`)
	for i, text := range texts {
		r, detail := cidrRule(text)
		if detail != "" {
			c.errorf(ranges[i], fmt.Sprintf("invalid allow_cidrs entry %q", text), "%s", detail)
			continue
		}
		r.Pos = posString(ranges[i])
		r.ref = ruleRef(r.Text, r.Pos)
		c.p.AllowCIDRs = append(c.p.AllowCIDRs, r)
	}
}

// cidrRule compiles one allow_cidrs entry, or says what to write instead.
func cidrRule(text string) (CIDRRule, string) {
	r := CIDRRule{Text: text}
	p, err := netip.ParsePrefix(text)
	if err != nil {
		if h, herr := CanonicalHost(strings.Trim(text, " ")); herr == nil {
			if h.IsAddr() {
				return r, fmt.Sprintf("an entry is an address range; for the one address write %q",
					netip.PrefixFrom(h.Addr, h.Addr.BitLen()).String())
			}
			if strings.Contains(h.Name, ".") {
				return r, fmt.Sprintf("allow_cidrs takes address ranges; to allow a host name write allow = [%q]", h.Name)
			}
		}
		return r, `write an address range in CIDR form, such as "10.20.0.0/16" or "fd12:3456::/48"`
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return r, "an IPv4-mapped range must keep the ::ffff:0:0/96 prefix; write the IPv4 range instead"
		}
		v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
		return r, fmt.Sprintf("write the IPv4 range %q", v4.String())
	}
	if m := p.Masked(); m != p {
		return r, fmt.Sprintf("it has bits set past the /%d prefix; write %q (or %q for the one address)",
			p.Bits(), m.String(), netip.PrefixFrom(p.Addr(), p.Addr().BitLen()).String())
	}
	ranges := floor4
	if p.Addr().Is6() {
		ranges = floor6
	}
	for _, f := range ranges {
		if f.prefix.Bits() <= p.Bits() && f.prefix.Contains(p.Addr()) {
			return r, fmt.Sprintf("%s lies entirely in the hard floor (%s), which no policy can open; remove it",
				p, strings.TrimPrefix(f.reason, "hard floor: "))
		}
	}
	r.Prefix = p
	return r, ""
}
