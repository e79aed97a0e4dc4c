package policy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	src := `# build agents
name        = "build"
mode        = "observe"
ports       = [443, 80, 8443, 443]
allow       = ["GitHub.com", "registry.npmjs.org:443", "*.Example.org", "Bücher.example:8443", "github.com"]
deny        = ["gist.github.com", "evil.example.org:80"]
allow_cidrs = ["10.20.0.0/16", "fd12:3456::/48", "0.0.0.0/0"]
`
	p, err := Parse("build.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "build.hcl" || p.Name != "build" || p.Mode != Observe {
		t.Errorf("source %q name %q mode %v", p.Source, p.Name, p.Mode)
	}
	if !slices.Equal(p.Ports, []uint16{80, 443, 8443}) {
		t.Errorf("ports %v, want sorted and without duplicates", p.Ports)
	}
	wantAllow := []HostRule{
		{Name: "github.com", Text: "GitHub.com", Pos: "build.hcl:5:16"},
		{Name: "registry.npmjs.org", Port: 443, Text: "registry.npmjs.org:443", Pos: "build.hcl:5:30"},
		{Name: "example.org", Text: "*.Example.org", Pos: "build.hcl:5:56", Wildcard: true},
		{Name: "xn--bcher-kva.example", Port: 8443, Text: "Bücher.example:8443", Pos: "build.hcl:5:73"},
		{Name: "github.com", Text: "github.com", Pos: "build.hcl:5:96"},
	}
	if len(p.Allow) != len(wantAllow) {
		t.Fatalf("allow = %+v", p.Allow)
	}
	for i, w := range wantAllow {
		g := p.Allow[i]
		g.ref = ""
		if g != w {
			t.Errorf("allow[%d] = %+v, want %+v", i, g, w)
		}
	}
	if len(p.Deny) != 2 || p.Deny[1].Name != "evil.example.org" || p.Deny[1].Port != 80 || p.Deny[0].Pos != "build.hcl:6:16" {
		t.Errorf("deny = %+v", p.Deny)
	}
	if len(p.AllowCIDRs) != 3 || p.AllowCIDRs[1].Prefix.String() != "fd12:3456::/48" || p.AllowCIDRs[0].Pos != "build.hcl:7:16" {
		t.Errorf("allow_cidrs = %+v", p.AllowCIDRs)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Parse("empty.hcl", []byte("# nothing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != Enforce || !slices.Equal(p.Ports, []uint16{80, 443}) || len(p.Allow)+len(p.Deny)+len(p.AllowCIDRs) != 0 {
		t.Errorf("defaults: %+v", p)
	}
	if d := p.DecideName("github.com", 443); d.Verdict != Deny {
		t.Errorf("empty policy allowed github.com: %+v", d)
	}
}

func TestNothing(t *testing.T) {
	p := Nothing()
	if p.Source != "(no policy: allows nothing)" || p.Mode != Enforce || !slices.Equal(p.Ports, []uint16{80, 443}) {
		t.Errorf("Nothing() = %+v", p)
	}
	p.Ports[0] = 1
	if Nothing().Ports[0] != 80 || DefaultPorts[0] != 80 {
		t.Error("Nothing shares its ports slice")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error text
	}{
		{"syntax", "allow = [\"a\"\n", []string{"p.hcl:1:"}},
		{"unknown attribute", "mode = \"enforce\"\nallow_cidr = [\"10.0.0.0/8\"]\n",
			[]string{`p.hcl:2:1: unknown attribute "allow_cidr"; did you mean allow_cidrs?`, "name, mode, ports, allow, deny, allow_cidrs"}},
		{"unknown attribute far from any", "colour = \"blue\"\n", []string{`p.hcl:1:1: unknown attribute "colour"; a policy has only name, mode, ports, allow, deny, allow_cidrs`}},
		{"cidrs alias", "cidrs = []\n", []string{"did you mean allow_cidrs?"}},
		{"block", "allow {\n}\n", []string{`p.hcl:1:1: unexpected block "allow"`, `allow = ["github.com"]`}},
		{"mode", `mode = "strict"`, []string{`p.hcl:1:8: unknown mode "strict"; write mode = "enforce"`, `mode = "observe"`}},
		{"mode type", `mode = 1`, []string{"p.hcl:1:8: mode must be a string"}},
		{"ip in allow", `allow = ["github.com", "10.9.0.7"]`,
			[]string{`p.hcl:1:24: invalid allow entry "10.9.0.7"; 10.9.0.7 is an IP address and allow takes names; to open an address write allow_cidrs = ["10.9.0.7/32"]`}},
		{"odd ip spelling in allow", `allow = ["0x0a.9.7"]`, []string{`allow_cidrs = ["10.9.0.7/32"]`}},
		{"v6 in allow", `allow = ["[2606:4700::1]:443"]`, []string{`allow_cidrs = ["2606:4700::1/128"]`}},
		{"floor ip in allow", `allow = ["2130706433"]`, []string{"127.0.0.1 is an IP address in the hard floor (loopback), which no policy can open; remove it"}},
		{"ip in deny", "allow = []\ndeny = [\"8.8.8.8\"]", []string{`p.hcl:2:9: invalid deny entry "8.8.8.8"`, "deny takes names"}},
		{"port not in ports", "ports = [443]\nallow = [\"x.test:80\"]\n",
			[]string{`p.hcl:2:10: port 80 of allow entry "x.test:80" is not in ports`, "add the port: ports = [80, 443]"}},
		{"port not in default ports", `allow = ["x.test:8443"]`, []string{"ports = [80, 443, 8443]"}},
		{"ports after allow in the file", "allow = [\"x.test:8443\"]\nports = [8443]\n", nil},
		{"port zero", `allow = ["x.test:0"]`, []string{"p.hcl:1:10:", "port must be a number from 1 to 65535"}},
		{"port too big", `allow = ["x.test:65536"]`, []string{"port must be a number from 1 to 65535"}},
		{"port junk", `allow = ["evil.test:443.allowed.test"]`, []string{`invalid allow entry "evil.test:443.allowed.test"`}},
		{"star", `allow = ["*"]`, []string{`p.hcl:1:10: invalid allow entry "*"`, `write mode = "observe"`}},
		{"star port", `allow = ["*:443"]`, []string{`write mode = "observe"`}},
		{"star deny", `deny = ["*"]`, []string{"remove it"}},
		{"inner wildcard", `allow = ["a.*.example.com"]`, []string{`as in "*.example.com"`}},
		{"partial wildcard", `allow = ["*example.com"]`, []string{`as in "*.example.com"`}},
		{"double wildcard", `allow = ["*.*.example.com"]`, []string{`as in "*.example.com"`}},
		{"url", `allow = ["https://user@github.com:443/org/repo"]`, []string{`a rule names a host, not a URL; write "github.com:443"`}},
		{"path", `allow = ["github.com/org"]`, []string{`a rule names a host, not a path; write "github.com"`}},
		{"spaces", `allow = [" github.com"]`, []string{`remove the spaces around it: "github.com"`}},
		{"empty entry", `allow = [""]`, []string{"p.hcl:1:10: empty allow entry"}},
		{"user info", `allow = ["me@github.com"]`, []string{"user info"}},
		{"zone", `allow = ["[fe80::1%eth0]"]`, []string{"zone"}},
		{"numeric junk name", `allow = ["example.123"]`, []string{"looks like an IPv4 address"}},
		{"bare word", `allow = [github.com]`, []string{`p.hcl:1:10: bare word github.com; write it in quotes: "github.com"`}},
		{"not a list", `allow = "github.com"`, []string{`p.hcl:1:9: allow must be a list; write allow = ["github.com"]`}},
		{"ports not a list", `ports = 443`, []string{"write ports = [443]"}},
		{"ports empty", `ports = []`, []string{"ports is empty"}},
		{"port string", `ports = ["443"]`, []string{"p.hcl:1:10: invalid port", "without quotes"}},
		{"port fraction", `ports = [443.5]`, []string{"invalid port"}},
		{"port range", `ports = [0, 70000]`, []string{"p.hcl:1:10: invalid port", "p.hcl:1:13: invalid port"}},
		{"number in allow", `allow = [443]`, []string{"allow entries must be strings"}},
		{"interpolation", `allow = ["${x}.com"]`, []string{"p.hcl:1:"}},
		{"function", `allow = [lower("X.com")]`, []string{"p.hcl:1:"}},
		{"null", `mode = null`, []string{"null value"}},
		{"cidr host bits", `allow_cidrs = ["10.20.0.1/16"]`, []string{`p.hcl:1:16: invalid allow_cidrs entry "10.20.0.1/16"`, `write "10.20.0.0/16" (or "10.20.0.1/32" for the one address)`}},
		{"cidr bare address", `allow_cidrs = ["10.9.0.7"]`, []string{`for the one address write "10.9.0.7/32"`}},
		{"cidr bare v6", `allow_cidrs = ["fd00::7"]`, []string{`"fd00::7/128"`}},
		{"cidr name", `allow_cidrs = ["db.internal.example"]`, []string{`to allow a host name write allow = ["db.internal.example"]`}},
		{"cidr junk", `allow_cidrs = ["10.0.0.0/33"]`, []string{`write an address range in CIDR form, such as "10.20.0.0/16"`}},
		{"cidr loopback", `allow_cidrs = ["127.0.0.0/8"]`, []string{"127.0.0.0/8 lies entirely in the hard floor (loopback), which no policy can open; remove it"}},
		{"cidr metadata", `allow_cidrs = ["169.254.0.0/16"]`, []string{"(link-local)"}},
		{"cidr metadata host", `allow_cidrs = ["169.254.169.254/32"]`, []string{"(cloud metadata address)"}},
		{"cidr fake range", `allow_cidrs = ["198.18.0.0/16"]`, []string{"fake address of the wall's DNS"}},
		{"cidr v6 loopback", `allow_cidrs = ["::1/128"]`, []string{"(loopback)"}},
		{"cidr v6 link-local", `allow_cidrs = ["fe80::/64"]`, []string{"(link-local)"}},
		{"cidr mapped", `allow_cidrs = ["::ffff:10.0.0.0/104"]`, []string{`write the IPv4 range "10.0.0.0/8"`}},
		{"cidr zone", `allow_cidrs = ["fe80::%eth0/64"]`, []string{"invalid allow_cidrs entry"}},
		{"many errors at once", "mode = \"x\"\nallow = [\"1.2.3.4\", \"ok.test\", \"*\"]\nallow_cidrs = [\"127.0.0.1/32\"]\nfoo = 1\n",
			[]string{"p.hcl:1:8:", "p.hcl:2:10:", "p.hcl:2:32:", "p.hcl:3:16:", "p.hcl:4:1:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("p.hcl", []byte(tt.src))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("parsed %+v, want an error", p)
			}
			if p != nil {
				t.Errorf("a policy came back with the error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Diags) == 0 {
				t.Fatalf("error %T %v is not a *ParseError with diagnostics", err, err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
			// Every line names the file and a position.
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "p.hcl:") {
					t.Errorf("error line %q has no position", line)
				}
			}
		})
	}
}

func TestParseErrorsInSourceOrder(t *testing.T) {
	_, err := Parse("p.hcl", []byte("allow = [\"1.1.1.1\"]\nbad = 1\nmode = \"x\"\n"))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "p.hcl:1:") || !strings.HasPrefix(lines[1], "p.hcl:2:") || !strings.HasPrefix(lines[2], "p.hcl:3:") {
		t.Errorf("errors out of order:\n%s", err)
	}
}

func TestParseDuplicatesAreHarmless(t *testing.T) {
	p, err := Parse("p.hcl", []byte(`allow = ["a.test", "A.test", "a.test."]
deny = ["b.a.test", "b.a.test"]
allow_cidrs = ["10.0.0.0/8", "10.0.0.0/8"]`))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.DecideName("a.test", 443); d.Verdict != Allow || d.Rule != "a.test (p.hcl:1:10)" {
		t.Errorf("first duplicate should match: %+v", d)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.hcl")
	if err := os.WriteFile(path, []byte("allow = [\"x.test\", \"1.2.3.4\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path+":1:20:") {
		t.Errorf("Load error %v does not name %s:1:20", err, path)
	}
	if err := os.WriteFile(path, []byte("allow = [\"x.test\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != path || p.Allow[0].Pos != path+":1:10" {
		t.Errorf("source %q pos %q", p.Source, p.Allow[0].Pos)
	}
	missing := filepath.Join(dir, "missing.hcl")
	if _, err := Load(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v", err)
	}
}

// TestExamplesParse compiles every policy under examples/policies and checks
// the demo policy does what the offline demo relies on.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "policies", "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"git-host.hcl", "package-registry.hcl", "model-api.hcl", "observe.hcl", "demo.hcl"} {
		if !slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) == want }) {
			t.Errorf("examples/policies/%s is missing", want)
		}
	}
	for _, f := range files {
		p, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if filepath.Base(f) != "observe.hcl" && len(p.Allow) == 0 {
			t.Errorf("%s allows no name", f)
		}
	}

	demo, err := Load(filepath.Join("..", "..", "examples", "policies", "demo.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if demo.Mode != Enforce || !slices.Equal(demo.Ports, []uint16{80, 443}) {
		t.Errorf("demo mode %v ports %v", demo.Mode, demo.Ports)
	}
	allowed := netipMust("10.203.0.2")
	for _, c := range []struct {
		name    string
		verdict Verdict
		reason  string
	}{
		{"allowed.demo.test", Allow, ReasonAllowedByRule},
		{"api.allowed.demo.test", Allow, ReasonAllowedByRule},
		{"forbidden.demo.test", Deny, ReasonNoAllowRule},
		{"denied.allowed.demo.test", Deny, ReasonDeniedByRule},
		{"x.denied.allowed.demo.test", Deny, ReasonDeniedByRule},
	} {
		for _, port := range []uint16{80, 443} {
			if d := demo.DecideName(c.name, port); d.Verdict != c.verdict || d.Reason != c.reason {
				t.Errorf("demo: %s:%d = %+v, want %v (%s)", c.name, port, d, c.verdict, c.reason)
			}
		}
	}
	if d := demo.DecideAddr(allowed, 443, "allowed.demo.test"); d.Verdict != Allow || d.Reason != ReasonAllowedByCIDR {
		t.Errorf("demo: 10.203.0.2 of allowed.demo.test = %+v", d)
	}
	if d := demo.DecideAddr(netipMust("10.204.0.2"), 443, "allowed.demo.test"); d.Verdict != Deny || d.Reason != ReasonPrivate {
		t.Errorf("demo: 10.204.0.2 of allowed.demo.test = %+v", d)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`mode = "enforce"
ports = [80, 443]
allow = ["github.com", "registry.npmjs.org:443", "*.example.com"]
deny = ["gist.github.com"]
allow_cidrs = ["10.20.0.0/16"]`))
	f.Add([]byte(`allow = ["1.2.3.4", "*", "a:0"] allow_cidrs = ["127.0.0.0/8"] x = 1`))
	f.Add([]byte("allow {}\nports = [443.5, \"x\"]"))
	f.Add([]byte(`allow = ["${x}"]`))
	f.Add([]byte(`writable = ["~/.claude", "/srv/x", "~/.config"] deny_read = ["~/.ssh/id_*"] allow_read = ["~/.ssh/*.pub"] pids_limit = 64`))
	f.Add([]byte(inspectSrc))
	f.Add([]byte(guardrailSrc))
	f.Add([]byte("allow = [\"a.test\"]\ninspect \"a.test\" {\n  allow_paths = [\"/x/**\"]\n  inject_header = { K = \"env:K\" }\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Parse("f.hcl", src)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Diags) == 0 || err.Error() == "" {
				t.Fatalf("error %v is not a non-empty *ParseError", err)
			}
			return
		}
		if p.Mode != Enforce && p.Mode != Observe || len(p.Ports) == 0 {
			t.Fatalf("compiled policy has mode %v ports %v", p.Mode, p.Ports)
		}
		for _, r := range append(slices.Clone(p.Allow), p.Deny...) {
			if h, err := CanonicalHost(r.Name); err != nil || h.Name != r.Name {
				t.Fatalf("rule %+v holds a name that is not canonical", r)
			}
			if r.Pos == "" || !strings.HasPrefix(r.ref, r.Text) {
				t.Fatalf("rule %+v has no position", r)
			}
		}
		for _, r := range p.Allow {
			if r.Port != 0 && !p.PortAllowed(r.Port) {
				t.Fatalf("allow rule %+v has a port outside %v", r, p.Ports)
			}
		}
		for _, c := range p.AllowCIDRs {
			if _, floored := Floor(c.Prefix.Addr()); floored && c.Prefix.Bits() == c.Prefix.Addr().BitLen() {
				t.Fatalf("allow_cidrs entry %v is a floored address", c.Prefix)
			}
		}
		// Whatever was written, no writable place is the system's or one
		// that programs outside the wall obey.
		for _, r := range p.Writable {
			if s, d := pathProblem("writable", r.Text, false); s != "" {
				t.Fatalf("writable entry %+v was accepted: %s; %s", r, s, d)
			}
		}
		if p.PidsLimit < minPidsLimit {
			t.Fatalf("pids_limit %d was accepted", p.PidsLimit)
		}
		for _, r := range p.Inspect {
			// Inspection narrows: an inspected host is one an allow rule covers.
			if h, err := CanonicalHost(r.Host); err != nil || h.Name != r.Host || !slices.ContainsFunc(p.Allow, func(a HostRule) bool { return a.Matches(r.Host, a.Port) }) {
				t.Fatalf("inspect %q is not a canonical, allowed host", r.Host)
			}
			for _, h := range r.Inject {
				if (h.Env == "") == (h.File == "") {
					t.Fatalf("inject_header %+v names no single source", h)
				}
			}
		}
		// Whatever was written, the floor holds.
		if d := p.DecideAddr(netipMust("169.254.169.254"), 80, ""); d.Verdict != Deny || !d.Floor {
			t.Fatalf("policy opened the metadata address: %+v", d)
		}
	})
}
