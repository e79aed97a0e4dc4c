package policy

import (
	"fmt"
	"net/textproto"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/net/http/httpguts"
)

// InspectRule is one inspect block: a host whose TLS the door terminates, so
// that each request on it is judged by method and path, and headers are added
// whose values the run never sees.
//
//	inspect "api.github.com" {
//	  allow_methods = ["GET", "HEAD"]                        # default: any
//	  allow_paths   = ["/repos/acme/*", "/user"]             # default: any
//	  deny_paths    = ["/repos/acme/*/actions/**"]           # deny wins
//	  inject_header = { Authorization = "env:GITHUB_TOKEN" } # or "file:/path"
//	}
//
// A block names one host exactly: its subdomains are not inspected unless
// they have blocks of their own. The host must be allowed by the policy's
// allow rules: inspection narrows what an allowed host may be asked, it never
// opens a host.
type InspectRule struct {
	Host string // canonical name
	Pos  string // "file:line:col" of the block's label

	// Methods the requests may use, upper case as HTTP spells them; nil
	// means any. MethodsLine is the allow_methods attribute as written, with
	// its position.
	Methods     []string
	MethodsLine string
	MethodsPos  string
	// AllowPaths a request's path must match one of; nil means any.
	AllowPaths     []PathGlob
	AllowPathsLine string
	AllowPathsPos  string
	// DenyPaths no request's path may match.
	DenyPaths []PathGlob
	// Inject are the headers set on every request to the host.
	Inject []HeaderInject
}

// HeaderInject is one inject_header entry: a header the door sets on every
// request to an inspected host, with a value postern reads from its own
// environment or from a file when the door starts. The value never appears
// in the policy.
type HeaderInject struct {
	Header string // canonical form, e.g. "Authorization"
	Env    string // the variable, for "env:NAME"
	File   string // the absolute path, for "file:PATH"
	Pos    string
}

// Source is the entry's value as written: "env:NAME" or "file:PATH".
func (h HeaderInject) Source() string {
	if h.Env != "" {
		return "env:" + h.Env
	}
	return "file:" + h.File
}

// Decision reasons of requests inside an inspected connection.
const (
	ReasonRequestAllowed   = "allowed by inspect rules"
	ReasonMethodNotAllowed = "method not in allow_methods"
	ReasonPathDenied       = "path denied by deny_paths"
	ReasonPathNotAllowed   = "path not in allow_paths"
	ReasonBadPath          = "unreadable request path"
)

// Inspection returns the inspect block for the canonical name, or nil when the
// door splices its connections.
func (p *Policy) Inspection(name string) *InspectRule {
	for i := range p.Inspect {
		if p.Inspect[i].Host == name {
			return &p.Inspect[i]
		}
	}
	return nil
}

// InjectEnv lists the environment variables inject_header entries read. They
// are postern's own: a run's environment must not carry them.
func (p *Policy) InjectEnv() []string {
	var out []string
	for _, r := range p.Inspect {
		for _, h := range r.Inject {
			if h.Env != "" && !slices.Contains(out, h.Env) {
				out = append(out, h.Env)
			}
		}
	}
	return out
}

// InjectFiles lists the files inject_header entries read. They are postern's
// own: a run must not be able to read them.
func (p *Policy) InjectFiles() []string {
	var out []string
	for _, r := range p.Inspect {
		for _, h := range r.Inject {
			if h.File != "" && !slices.Contains(out, h.File) {
				out = append(out, h.File)
			}
		}
	}
	return out
}

// DecideRequest judges one request to an inspected host: method as sent, norm
// its path as NormalisePath gives it. A deny_paths entry wins; then the method
// must be in allow_methods and the path match an allow_paths entry, when the
// block has them. Observe mode allows what enforce would deny and marks it.
func (p *Policy) DecideRequest(r *InspectRule, method, norm string) Decision {
	return p.observe(r.decide(method, norm))
}

func (r *InspectRule) decide(method, norm string) Decision {
	for i := range r.DenyPaths {
		if r.DenyPaths[i].Matches(norm, true) {
			g := &r.DenyPaths[i]
			return Decision{Verdict: Deny, Reason: ReasonPathDenied, Rule: ruleRef(strconv.Quote(g.Text), g.Pos)}
		}
	}
	if r.Methods != nil && !slices.Contains(r.Methods, method) {
		return Decision{Verdict: Deny, Reason: ReasonMethodNotAllowed, Rule: ruleRef(r.MethodsLine, r.MethodsPos)}
	}
	if r.AllowPaths == nil {
		return Decision{Verdict: Allow, Reason: ReasonRequestAllowed, Rule: ruleRef(`inspect "`+r.Host+`"`, r.Pos)}
	}
	for i := range r.AllowPaths {
		if r.AllowPaths[i].Matches(norm, false) {
			g := &r.AllowPaths[i]
			return Decision{Verdict: Allow, Reason: ReasonRequestAllowed, Rule: ruleRef(strconv.Quote(g.Text), g.Pos)}
		}
	}
	return Decision{Verdict: Deny, Reason: ReasonPathNotAllowed, Rule: ruleRef(r.AllowPathsLine, r.AllowPathsPos)}
}

// SuggestRequest is the policy line that would let a request DecideRequest
// denied through, for a refusal's text: the allow_methods or allow_paths
// attribute with the method or path added. It returns "" for a request a
// deny_paths entry refuses (a deny is a deliberate choice, and the
// suggestion is not to undo it) or one whose path could not be read.
func (p *Policy) SuggestRequest(r *InspectRule, method, norm string) string {
	d := r.decide(method, norm)
	switch d.Reason {
	case ReasonMethodNotAllowed:
		ms := append(slices.Clone(r.Methods), method)
		return "allow_methods = " + quoteList(ms)
	case ReasonPathNotAllowed:
		ps := make([]string, 0, len(r.AllowPaths)+1)
		for _, g := range r.AllowPaths {
			ps = append(ps, g.Text)
		}
		return "allow_paths = " + quoteList(append(ps, EscapePath(strings.TrimSuffix(norm, "/"))))
	}
	return ""
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The attributes an inspect block may have.
var inspectAttrs = []string{"allow_methods", "allow_paths", "deny_paths", "inject_header"}

// hopByHop are headers that belong to one connection, or that frame the
// message: inject_header cannot set them.
var notInjectable = []string{
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection",
	"Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade",
}

// inspect compiles one inspect block; the host rules are compiled already.
func (c *compiler) inspect(blk *hclsyntax.Block) {
	if len(blk.Labels) != 1 {
		r := blk.TypeRange
		if len(blk.Labels) > 1 {
			r = blk.LabelRanges[1]
		}
		c.errorf(r, "an inspect block names one host",
			`write inspect "api.github.com" { allow_methods = ["GET"] }, one block per host`)
		return
	}
	ir := InspectRule{Pos: posString(blk.LabelRanges[0])}
	if ok := c.inspectHost(blk, &ir); !ok {
		return
	}
	for _, prev := range c.p.Inspect {
		if prev.Host == ir.Host {
			c.errorf(blk.LabelRanges[0], fmt.Sprintf("a second inspect block for %s", ir.Host),
				"the first is at %s; write one block per host", prev.Pos)
			return
		}
	}
	for _, inner := range blk.Body.Blocks {
		c.errorf(inner.TypeRange, fmt.Sprintf("unexpected block %q in inspect", inner.Type),
			"an inspect block has only the attributes %s", strings.Join(inspectAttrs, ", "))
	}
	attrs := make([]*hclsyntax.Attribute, 0, len(blk.Body.Attributes))
	for _, a := range blk.Body.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	for _, a := range attrs {
		switch a.Name {
		case "allow_methods":
			ir.Methods, ir.MethodsLine, ir.MethodsPos = c.methods(a)
		case "allow_paths":
			ir.AllowPaths = c.globs(a)
			ir.AllowPathsLine, ir.AllowPathsPos = c.line(a), posString(a.SrcRange)
			if ir.AllowPaths == nil {
				ir.AllowPaths = []PathGlob{} // empty or all wrong: nothing passes
			}
		case "deny_paths":
			ir.DenyPaths = c.globs(a)
		case "inject_header":
			ir.Inject = c.injects(a)
		default:
			detail := "an inspect block has only " + strings.Join(inspectAttrs, ", ")
			if near := nearest(a.Name, inspectAttrs); near != "" {
				detail = "did you mean " + near + "? " + detail
			}
			c.errorf(a.NameRange, fmt.Sprintf("unknown attribute %q in inspect", a.Name), "%s", detail)
		}
	}
	c.p.Inspect = append(c.p.Inspect, ir)
}

// inspectHost reads the block's label: a host name the policy allows.
func (c *compiler) inspectHost(blk *hclsyntax.Block, ir *InspectRule) bool {
	text := blk.Labels[0]
	r := blk.LabelRanges[0]
	bad := fmt.Sprintf("invalid inspect host %q", text)
	switch {
	case strings.Contains(text, "://"):
		c.errorf(r, bad, "an inspect block names a host, not a URL, as in inspect \"api.github.com\"")
		return false
	case strings.Contains(text, "*"):
		c.errorf(r, bad, "an inspect block names one host exactly, without wildcards; write a block for each host whose requests the door judges")
		return false
	case strings.ContainsAny(text, "/?#"):
		c.errorf(r, bad, "an inspect block names a host; judge paths with allow_paths and deny_paths inside it")
		return false
	}
	h, port, err := SplitTarget(text, 0)
	if err != nil {
		c.errorf(r, bad, "%v; write a host name such as \"api.github.com\"", err)
		return false
	}
	if h.IsAddr() {
		c.errorf(r, bad, "%s is an IP address; the door's certificate names a host, so write the host name its clients use", h.Addr)
		return false
	}
	if port != 0 {
		c.errorf(r, bad, "an inspect block covers every port the policy admits for its host; write inspect %q", h.Name)
		return false
	}
	ir.Host = h.Name
	for i := range c.p.Deny {
		if c.p.Deny[i].Port == 0 && c.p.Deny[i].Matches(h.Name, 0) {
			c.errorf(r, fmt.Sprintf("inspect %q names a denied host", text),
				"deny entry %s denies it on every port, so no request to it reaches the door's inspection; remove one or the other", c.p.Deny[i].label())
			return false
		}
	}
	for i := range c.p.Allow {
		if c.p.Allow[i].Matches(h.Name, c.p.Allow[i].Port) {
			return true
		}
	}
	c.errorf(r, fmt.Sprintf("inspect %q names a host no allow rule covers", text),
		"inspection narrows what an allowed host may be asked, it never opens one; add the host to allow, as in allow = [%q]", h.Name)
	return false
}

// line is an attribute's source text, as the policy has it, for messages.
func (c *compiler) line(a *hclsyntax.Attribute) string {
	s := strings.Join(strings.Fields(string(a.SrcRange.SliceBytes(c.src))), " ")
	return strings.Replace(s, "[ ", "[", 1)
}

func (c *compiler) methods(a *hclsyntax.Attribute) ([]string, string, string) {
	texts, ranges := c.strElems(a, `"GET", "HEAD"`)
	if emptyList(a) {
		c.errorf(a.Expr.Range(), "allow_methods is empty", "no request could pass; leave allow_methods out to allow any method, or list some, as in allow_methods = [\"GET\", \"HEAD\"]")
	}
	out := []string{}
	for i, m := range texts {
		switch {
		case m == "" || !isToken(m):
			c.errorf(ranges[i], fmt.Sprintf("invalid method %q", m), "a method is a word such as \"GET\" or \"POST\"")
			continue
		case m != strings.ToUpper(m):
			c.errorf(ranges[i], fmt.Sprintf("method %q is not upper case", m), "methods are case-sensitive and clients send them upper case; write %q", strings.ToUpper(m))
			continue
		case m == "CONNECT":
			c.errorf(ranges[i], "CONNECT cannot be allowed inside an inspected connection", "a tunnel inside the connection would carry requests the door cannot judge; remove it")
			continue
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, c.line(a), posString(a.SrcRange)
}

// emptyList reports whether a is written as an empty list.
func emptyList(a *hclsyntax.Attribute) bool {
	t, ok := a.Expr.(*hclsyntax.TupleConsExpr)
	return ok && len(t.Exprs) == 0
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

func (c *compiler) globs(a *hclsyntax.Attribute) []PathGlob {
	texts, ranges := c.strElems(a, `"/repos/acme/*", "/user"`)
	if emptyList(a) {
		if a.Name == "allow_paths" {
			c.errorf(a.Expr.Range(), "allow_paths is empty", "no request could pass; leave allow_paths out to allow any path, or list some, as in allow_paths = [\"/user\"]")
		}
		return nil
	}
	var out []PathGlob
	for i, text := range texts {
		g, detail := compileGlob(text)
		if detail != "" {
			c.errorf(ranges[i], fmt.Sprintf("invalid %s entry %q", a.Name, text), "%s", detail)
			continue
		}
		g.Pos = posString(ranges[i])
		out = append(out, g)
	}
	return out
}

func (c *compiler) injects(a *hclsyntax.Attribute) []HeaderInject {
	obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		c.errorf(a.Expr.Range(), "inject_header must be a map of header names to sources",
			`write inject_header = { Authorization = "env:GITHUB_TOKEN" }`)
		return nil
	}
	var out []HeaderInject
	for _, item := range obj.Items {
		kr := item.KeyExpr.Range()
		name := hcl.ExprAsKeyword(item.KeyExpr)
		if name == "" {
			v, d := item.KeyExpr.Value(nil)
			if d.HasErrors() || v.IsNull() || v.Type() != cty.String {
				text := strings.TrimSpace(string(kr.SliceBytes(c.src)))
				c.errorf(kr, fmt.Sprintf("header name %s is not a string", text), "write the header name in quotes: %q", strings.Trim(text, `"`))
				continue
			}
			name = v.AsString()
		}
		if !httpguts.ValidHeaderFieldName(name) {
			c.errorf(kr, fmt.Sprintf("invalid header name %q", name), "a header name is a word such as \"Authorization\" or \"X-Api-Key\"")
			continue
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(notInjectable, name) {
			c.errorf(kr, fmt.Sprintf("header %s cannot be injected", name),
				"it belongs to the connection or frames the message, and the door sets it itself; inject a header the server reads for credentials, such as Authorization")
			continue
		}
		if slices.ContainsFunc(out, func(h HeaderInject) bool { return h.Header == name }) {
			c.errorf(kr, fmt.Sprintf("header %s is injected twice", name), "keep one entry per header")
			continue
		}
		vr := item.ValueExpr.Range()
		v, d := item.ValueExpr.Value(nil)
		if d.HasErrors() || v.IsNull() || v.Type() != cty.String {
			c.errorf(vr, fmt.Sprintf("the source of header %s must be a string", name), `write "env:NAME" or "file:/absolute/path" in quotes`)
			continue
		}
		h := HeaderInject{Header: name, Pos: posString(vr)}
		src := v.AsString()
		kind, rest, _ := strings.Cut(src, ":")
		switch {
		case kind == "env" && isEnvName(rest):
			h.Env = rest
		case kind == "file" && filepath.IsAbs(rest) && filepath.Clean(rest) == rest:
			h.File = rest
		case kind == "env":
			c.errorf(vr, fmt.Sprintf("invalid variable name for header %s", name), "write env:NAME, where NAME is letters, digits and underscores, not starting with a digit")
			continue
		case kind == "file":
			c.errorf(vr, fmt.Sprintf("invalid file for header %s", name), "write file:/absolute/path, with a clean absolute path (no .., no trailing /)")
			continue
		default:
			// The value itself may be a secret someone wrote into the
			// policy: the message does not repeat it.
			c.errorf(vr, fmt.Sprintf("the value of header %s must name where postern reads it", name),
				"write \"env:NAME\" (a variable of postern's own environment) or \"file:/absolute/path\"; the value itself never goes in a policy, where the run could read it")
			continue
		}
		out = append(out, h)
	}
	return out
}

func isEnvName(s string) bool {
	if s == "" || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
