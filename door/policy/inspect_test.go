package policy

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const inspectSrc = `ports = [80, 443]
allow = ["github.com", "example.org"]
deny  = ["gist.github.com"]

inspect "API.GitHub.com" {
  allow_methods = ["GET", "HEAD"]
  allow_paths   = ["/repos/acme/*", "/user", "/repos/acme/*/issues/**"]
  deny_paths    = ["/repos/acme/*/actions/**"]
  inject_header = { Authorization = "env:GITHUB_TOKEN", X-Api-Key = "file:/etc/postern/key" }
}

inspect "example.org" {
}
`

func TestParseInspect(t *testing.T) {
	p, err := Parse("p.hcl", []byte(inspectSrc))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Inspect) != 2 {
		t.Fatalf("inspect = %+v", p.Inspect)
	}
	r := p.Inspection("api.github.com")
	if r == nil || r.Pos != "p.hcl:5:9" {
		t.Fatalf("Inspection(api.github.com) = %+v", r)
	}
	if !slices.Equal(r.Methods, []string{"GET", "HEAD"}) || r.MethodsLine != `allow_methods = ["GET", "HEAD"]` || r.MethodsPos != "p.hcl:6:3" {
		t.Errorf("methods %q line %q at %s", r.Methods, r.MethodsLine, r.MethodsPos)
	}
	if len(r.AllowPaths) != 3 || r.AllowPaths[1].Text != "/user" || r.AllowPaths[1].Pos != "p.hcl:7:37" {
		t.Errorf("allow_paths %+v", r.AllowPaths)
	}
	if len(r.DenyPaths) != 1 || r.DenyPaths[0].Text != "/repos/acme/*/actions/**" {
		t.Errorf("deny_paths %+v", r.DenyPaths)
	}
	want := []HeaderInject{
		{Header: "Authorization", Env: "GITHUB_TOKEN", Pos: "p.hcl:9:37"},
		{Header: "X-Api-Key", File: "/etc/postern/key", Pos: "p.hcl:9:69"},
	}
	if !slices.Equal(r.Inject, want) {
		t.Errorf("inject %+v, want %+v", r.Inject, want)
	}
	if !slices.Equal(p.InjectEnv(), []string{"GITHUB_TOKEN"}) || !slices.Equal(p.InjectFiles(), []string{"/etc/postern/key"}) {
		t.Errorf("InjectEnv %q InjectFiles %q", p.InjectEnv(), p.InjectFiles())
	}
	e := p.Inspection("example.org")
	if e == nil || e.Methods != nil || e.AllowPaths != nil || e.Inject != nil {
		t.Errorf("an empty block must allow any method and path: %+v", e)
	}
	if p.Inspection("github.com") != nil || p.Inspection("sub.example.org") != nil {
		t.Error("an inspect block covers its host exactly, not its parent or subdomains")
	}
}

func TestDecideRequest(t *testing.T) {
	p, err := Parse("p.hcl", []byte(inspectSrc))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Inspection("api.github.com")
	for _, c := range []struct {
		method, raw string
		verdict     Verdict
		reason      string
		rule        string
	}{
		{"GET", "/repos/acme/widgets", Allow, ReasonRequestAllowed, `"/repos/acme/*" (p.hcl:7:20)`},
		{"GET", "/repos/acme/widgets/", Allow, ReasonRequestAllowed, `"/repos/acme/*" (p.hcl:7:20)`},
		{"HEAD", "/user?tab=1", Allow, ReasonRequestAllowed, `"/user" (p.hcl:7:37)`},
		{"GET", "/repos/acme/widgets/issues", Allow, ReasonRequestAllowed, `"/repos/acme/*/issues/**" (p.hcl:7:46)`},
		{"GET", "/repos/acme/widgets/issues/7/comments", Allow, ReasonRequestAllowed, `"/repos/acme/*/issues/**" (p.hcl:7:46)`},
		{"GET", "/repos/acme", Deny, ReasonPathNotAllowed, `allow_paths = ["/repos/acme/*", "/user", "/repos/acme/*/issues/**"] (p.hcl:7:3)`},
		{"GET", "/repos/acme/w/pulls", Deny, ReasonPathNotAllowed, ""},
		{"DELETE", "/repos/acme/widgets", Deny, ReasonMethodNotAllowed, `allow_methods = ["GET", "HEAD"] (p.hcl:6:3)`},
		{"get", "/user", Deny, ReasonMethodNotAllowed, ""},
		// Deny wins, and holds against every spelling of the path.
		{"GET", "/repos/acme/w/actions/runs", Deny, ReasonPathDenied, `"/repos/acme/*/actions/**" (p.hcl:8:20)`},
		{"GET", "/repos/acme/w/actions", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/ACME/w/Actions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w%2factions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w%5Cactions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w\\actions", Deny, ReasonPathDenied, ""},
		{"GET", "//repos//acme//w//actions//", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w/./actions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w/x/../actions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w/x/%2e%2e/actions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/acme/w/x/..;/actions/runs", Deny, ReasonPathDenied, ""},
		{"GET", "/repos/%61cme/w/%61ctions", Deny, ReasonPathDenied, ""},
		// Climbing out of an allowed prefix is judged where it lands.
		{"GET", "/repos/acme/../other", Deny, ReasonPathNotAllowed, ""},
		{"GET", "/repos%2facme/..%2fother", Deny, ReasonPathNotAllowed, ""},
		{"GET", "/repos/acme/x/../../../other", Deny, ReasonPathNotAllowed, ""},
		{"GET", "/other/../repos/acme/x", Allow, ReasonRequestAllowed, ""},
		// The allow globs are case-sensitive.
		{"GET", "/Repos/acme/x", Deny, ReasonPathNotAllowed, ""},
	} {
		norm, err := NormalisePath(c.raw)
		if err != nil {
			t.Errorf("NormalisePath(%q): %v", c.raw, err)
			continue
		}
		d := p.DecideRequest(r, c.method, norm)
		if d.Verdict != c.verdict || d.Reason != c.reason || (c.rule != "" && d.Rule != c.rule) {
			t.Errorf("%s %s (normalised %q) = %+v, want %v %q %q", c.method, c.raw, norm, d, c.verdict, c.reason, c.rule)
		}
	}
}

func TestDecideRequestObserve(t *testing.T) {
	p, err := Parse("p.hcl", []byte(`mode = "observe"
allow = ["api.test"]
inspect "api.test" {
  allow_methods = ["GET"]
}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := p.DecideRequest(p.Inspection("api.test"), "POST", "/x")
	if d.Verdict != Allow || !d.WouldDeny || d.Reason != ReasonMethodNotAllowed {
		t.Errorf("observe mode: %+v", d)
	}
}

func TestSuggestRequest(t *testing.T) {
	p, err := Parse("p.hcl", []byte(inspectSrc))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Inspection("api.github.com")
	for _, c := range []struct{ method, norm, want string }{
		{"DELETE", "/user", `allow_methods = ["GET", "HEAD", "DELETE"]`},
		{"GET", "/orgs/acme/a b/", `allow_paths = ["/repos/acme/*", "/user", "/repos/acme/*/issues/**", "/orgs/acme/a%20b"]`},
		{"GET", "/repos/acme/x/actions", ""},
		{"GET", "/user", ""},
	} {
		if got := p.SuggestRequest(r, c.method, c.norm); got != c.want {
			t.Errorf("SuggestRequest(%s %s) = %q, want %q", c.method, c.norm, got, c.want)
		}
	}
}

func TestParseInspectErrors(t *testing.T) {
	base := "allow = [\"api.test\"]\ndeny = [\"bad.test\"]\n"
	for _, c := range []struct{ name, src, want string }{
		{"no label", `inspect { }`, `p.hcl:3:1: an inspect block names one host`},
		{"two labels", `inspect "api.test" "b" { }`, `p.hcl:3:20: an inspect block names one host`},
		{"url", `inspect "https://api.test" { }`, `a host, not a URL`},
		{"wildcard", `inspect "*.api.test" { }`, `without wildcards`},
		{"port", `inspect "api.test:443" { }`, `covers every port`},
		{"address", `inspect "10.1.2.3" { }`, `10.1.2.3 is an IP address`},
		{"not allowed", `inspect "other.test" { }`, `p.hcl:3:9: inspect "other.test" names a host no allow rule covers; inspection narrows what an allowed host may be asked, it never opens one; add the host to allow, as in allow = ["other.test"]`},
		{"denied", `inspect "bad.test" { }`, `names a denied host`},
		{"twice", "inspect \"api.test\" { }\ninspect \"API.test\" { }", `p.hcl:4:9: a second inspect block for api.test; the first is at p.hcl:3:9`},
		{"unknown attr", `inspect "api.test" { allow_method = ["GET"] }`, `unknown attribute "allow_method" in inspect; did you mean allow_methods?`},
		{"inner block", "inspect \"api.test\" {\n  rules {\n  }\n}", `unexpected block "rules" in inspect`},
		{"lower method", `inspect "api.test" { allow_methods = ["get"] }`, `method "get" is not upper case; methods are case-sensitive and clients send them upper case; write "GET"`},
		{"connect", `inspect "api.test" { allow_methods = ["CONNECT"] }`, `CONNECT cannot be allowed`},
		{"empty methods", `inspect "api.test" { allow_methods = [] }`, `allow_methods is empty`},
		{"bad method", `inspect "api.test" { allow_methods = ["GE T"] }`, `invalid method "GE T"`},
		{"empty paths", `inspect "api.test" { allow_paths = [] }`, `allow_paths is empty`},
		{"relative path", `inspect "api.test" { allow_paths = ["user"] }`, `a path starts with /; write "/user"`},
		{"query", `inspect "api.test" { deny_paths = ["/x?y=1"] }`, `without their query; write "/x"`},
		{"double star", `inspect "api.test" { allow_paths = ["/a/**b"] }`, `must be a segment of its own`},
		{"dot", `inspect "api.test" { allow_paths = ["/a/../b"] }`, `never match a normalised path`},
		{"slashes", `inspect "api.test" { allow_paths = ["/a//b"] }`, `write "/a/b"`},
		{"bad escape", `inspect "api.test" { allow_paths = ["/a%zz"] }`, `malformed percent-escape`},
		{"not a map", `inspect "api.test" { inject_header = "env:X" }`, `inject_header must be a map`},
		{"header expr", `inspect "api.test" { inject_header = { (1+2) = "env:K" } }`, `header name (1+2) is not a string`},
		{"bad header", `inspect "api.test" { inject_header = { "X Api" = "env:K" } }`, `invalid header name "X Api"`},
		{"secret file", `inspect "api.test" { inject_header = { Authorization = "file:/k/" } }`, `invalid file`},
		{"hop header", `inspect "api.test" { inject_header = { Host = "env:K" } }`, `header Host cannot be injected`},
		{"twice header", `inspect "api.test" { inject_header = { authorization = "env:K", Authorization = "env:L" } }`, `header Authorization is injected twice`},
		{"bad env", `inspect "api.test" { inject_header = { Authorization = "env:1X" } }`, `invalid variable name`},
		{"relative file", `inspect "api.test" { inject_header = { Authorization = "file:key" } }`, `invalid file`},
		{"literal secret", `inspect "api.test" { inject_header = { Authorization = "Bearer s3cr3t-token" } }`, `the value of header Authorization must name where postern reads it`},
	} {
		_, err := Parse("p.hcl", []byte(base+c.src+"\n"))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: Parse = %v, want a *ParseError", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error\n%s\nwant it to contain\n%s", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error repeats a value written into the policy: %s", c.name, err)
		}
	}
}

func TestNormalisePath(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"/", "/"},
		{"*", "*"},
		{"/a/b", "/a/b"},
		{"/a/b/", "/a/b/"},
		{"/a/b?x=/../y", "/a/b"},
		{"//a///b//", "/a/b/"},
		{"/a/./b/../c", "/a/c"},
		{"/a/b/..", "/a/"},
		{"/..", "/"},
		{"/../../a", "/a"},
		{"/a%2Fb", "/a/b"},
		{"/a%2fb%2F..%2Fc", "/a/c"},
		{"/a%5cb\\c", "/a/b/c"},
		{"/%2e%2E/a", "/a"},
		{"/a/..;x=1/b", "/b"},
		{"/a/.;/b", "/a/b"},
		{"/a;x=1/b", "/a;x=1/b"},
		{"/caf%C3%A9", "/café"},
		{"/a%20b", "/a b"},
		{"/100%25", "/100%"},
		{"/...", "/..."},
		{"/a/.b", "/a/.b"},
	} {
		got, err := NormalisePath(c.raw)
		if err != nil || got != c.want {
			t.Errorf("NormalisePath(%q) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	for _, raw := range []string{"", "a/b", "http://x/a", "/a%", "/a%2", "/a%zz", "/a%00b", "/a\x01b", "/a%0a", "/a%7F", "/" + strings.Repeat("a", maxPathLen)} {
		if got, err := NormalisePath(raw); !errors.Is(err, ErrBadPath) {
			t.Errorf("NormalisePath(%q) = %q, %v; want ErrBadPath", raw, got, err)
		}
	}
}

func TestEscapePath(t *testing.T) {
	for _, c := range []struct{ norm, want string }{
		{"/", "/"},
		{"*", "*"},
		{"/a b/café", "/a%20b/caf%C3%A9"},
		{"/100%", "/100%25"},
		{"/a?b#c", "/a%3Fb%23c"},
		{"/a;x=1/@b:c/~-._!$&'()*+,", "/a;x=1/@b:c/~-._!$&'()*+,"},
	} {
		if got := EscapePath(c.norm); got != c.want {
			t.Errorf("EscapePath(%q) = %q, want %q", c.norm, got, c.want)
		}
	}
}

func TestGlobMatches(t *testing.T) {
	for _, c := range []struct {
		glob, path string
		fold, want bool
	}{
		{"/", "/", false, true},
		{"/", "/a", false, false},
		{"/**", "/", false, true},
		{"/**", "/a/b/c", false, true},
		{"/a/*", "/a/b", false, true},
		{"/a/*", "/a", false, false},
		{"/a/*", "/a/", false, false},
		{"/a/*", "/a/b/c", false, false},
		{"/a/*/", "/a/b", false, true},
		{"/a/b", "/a/b/", false, true},
		{"/a/**", "/a", false, true},
		{"/a/**/z", "/a/z", false, true},
		{"/a/**/z", "/a/b/c/z", false, true},
		{"/a/**/z", "/a/b/c/y", false, false},
		{"/a/**/**/z", "/a/z", false, true},
		{"/a/b*", "/a/b", false, true},
		{"/a/b*", "/a/bcd", false, true},
		{"/a/*c*d", "/a/xcyd", false, true},
		{"/a/*c*d", "/a/xcyde", false, false},
		{"/a/*.json", "/a/x.json", false, true},
		{"/A/b", "/a/B", true, true},
		{"/A/b", "/a/B", false, false},
		{"/a%20b", "/a b", false, true},
		{"/a/*", "*", false, false},
	} {
		g, detail := compileGlob(c.glob)
		if detail != "" {
			t.Fatalf("compileGlob(%q): %s", c.glob, detail)
		}
		if got := g.Matches(c.path, c.fold); got != c.want {
			t.Errorf("%q matches %q (fold %v) = %v, want %v", c.glob, c.path, c.fold, got, c.want)
		}
	}
}

// globRegexp is an independent statement of the glob rules, as a regular
// expression over a normalised path without its trailing slash.
func globRegexp(glob string, fold bool) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	if fold {
		b.WriteString("(?i)")
	}
	dec, _ := percentDecode(glob)
	dec = strings.TrimSuffix(dec, "/")
	if dec == "" {
		b.WriteString("/?$")
		return regexp.MustCompile(b.String())
	}
	for _, seg := range strings.Split(dec[1:], "/") {
		if seg == "**" {
			b.WriteString("(?:/[^/]+)*")
			continue
		}
		b.WriteString("/")
		for i, lit := range strings.Split(seg, "*") {
			if i > 0 {
				b.WriteString("[^/]*")
			}
			b.WriteString(regexp.QuoteMeta(lit))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func FuzzPathMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"/a/*", "/a/b"}, {"/a/**/z", "/a/b/c/z"}, {"/a/*c*d", "/a/xcyde"}, {"/**", "/"},
		{"/repos/acme/*/actions/**", "/repos/acme/w%2factions/runs"}, {"/a/**/**/b", "//a/../a/b"},
	} {
		f.Add(s[0], s[1], false)
		f.Add(s[0], s[1], true)
	}
	f.Fuzz(func(t *testing.T, glob, raw string, fold bool) {
		g, detail := compileGlob(glob)
		norm, err := NormalisePath(raw)
		if detail != "" || err != nil || norm == "*" {
			return
		}
		// The regular expression works on bytes as text; keep to UTF-8 and
		// letters the two fold alike.
		if !isASCII(glob) || !isASCII(norm) {
			return
		}
		want := globRegexp(glob, fold).MatchString(strings.TrimSuffix(norm, "/"))
		if got := g.Matches(norm, fold); got != want {
			t.Fatalf("%q matches %q (fold %v) = %v; the regular expression says %v", glob, norm, fold, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func FuzzNormalisePath(f *testing.F) {
	for _, s := range []string{"/", "*", "/a/../b", "/a%2f..%2fb", "//a//b/", "/a\\b", "/a/..;/b", "/%2e%2e", "/caf%C3%A9?q=1", "/a%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		norm, err := NormalisePath(raw)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("NormalisePath(%q): error %v does not wrap ErrBadPath", raw, err)
			}
			return
		}
		if norm == "*" {
			return
		}
		if !strings.HasPrefix(norm, "/") || strings.Contains(norm, "//") || strings.Contains(norm, "\\") {
			t.Fatalf("NormalisePath(%q) = %q: not one canonical path", raw, norm)
		}
		for _, seg := range splitPath(norm) {
			dot, _, _ := strings.Cut(seg, ";")
			if dot == "." || dot == ".." {
				t.Fatalf("NormalisePath(%q) = %q keeps a dot segment", raw, norm)
			}
		}
		// What goes upstream reads back as exactly what was judged: a server
		// that normalises it again finds the same path.
		esc := EscapePath(norm)
		again, err := NormalisePath(esc)
		if err != nil || again != norm {
			t.Fatalf("NormalisePath(%q) = %q, escaped %q, which normalises to %q (%v)", raw, norm, esc, again, err)
		}
		if strings.ContainsAny(esc, "?# \\") {
			t.Fatalf("EscapePath(%q) = %q holds a byte that is not a path's", norm, esc)
		}
	})
}
