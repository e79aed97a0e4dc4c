package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestFromSpecCompilesAsParseDoes(t *testing.T) {
	s := Spec{
		Name:       "alice",
		Mode:       "observe",
		Ports:      []uint16{443, 80, 8443, 443},
		Allow:      []string{"GitHub.com", "registry.npmjs.org:443", "*.Example.org"},
		Deny:       []string{"gist.github.com"},
		AllowCIDRs: []string{"10.20.0.0/16"},
	}
	p, err := FromSpec("gateway client alice", s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse("f.hcl", []byte(`name = "alice"
mode = "observe"
ports = [443, 80, 8443, 443]
allow = ["GitHub.com", "registry.npmjs.org:443", "*.Example.org"]
deny = ["gist.github.com"]
allow_cidrs = ["10.20.0.0/16"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != f.Mode || !slices.Equal(p.Ports, f.Ports) || len(p.Allow) != len(f.Allow) || len(p.Deny) != 1 || len(p.AllowCIDRs) != 1 {
		t.Fatalf("FromSpec %+v, Parse %+v", p, f)
	}
	for i := range p.Allow {
		a, b := p.Allow[i], f.Allow[i]
		if a.Name != b.Name || a.Port != b.Port || a.Wildcard != b.Wildcard || a.Text != b.Text {
			t.Errorf("allow[%d]: %+v vs %+v", i, a, b)
		}
	}
	d := p.DecideName("api.github.com", 443)
	if d.Verdict != Allow || d.Rule != "GitHub.com" {
		t.Errorf("decision %+v, want allow by rule GitHub.com (no position)", d)
	}
	if d := p.DecideName("gist.github.com", 443); d.Verdict != Allow || !d.WouldDeny || d.Rule != "gist.github.com" {
		t.Errorf("observe: %+v", d)
	}
	back := p.Spec()
	if back.Mode != "observe" || !slices.Equal(back.Ports, []uint16{80, 443, 8443}) || !slices.Equal(back.Allow, s.Allow) ||
		!slices.Equal(back.Deny, s.Deny) || !slices.Equal(back.AllowCIDRs, s.AllowCIDRs) || back.Name != "alice" {
		t.Errorf("Spec() = %+v", back)
	}
}

func TestFromSpecDefaults(t *testing.T) {
	p, err := FromSpec("x", Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != Enforce || !slices.Equal(p.Ports, DefaultPorts) {
		t.Errorf("defaults %+v", p)
	}
}

func TestFromSpecErrorsNameTheEntryAndTheFix(t *testing.T) {
	cases := []struct {
		s    Spec
		want []string
	}{
		{Spec{Allow: []string{"https://github.com/x"}}, []string{`allow[0] "https://github.com/x"`, `a rule names a host, not a URL; write "github.com"`}},
		{Spec{Allow: []string{"ok.com", "*"}}, []string{`allow[1] "*"`, `mode = "observe"`}},
		{Spec{Allow: []string{"10.0.0.1"}}, []string{`allow[0]`, `allow_cidrs = ["10.0.0.1/32"]`}},
		{Spec{Allow: []string{"a.com:8443"}}, []string{`port 8443 of allow entry "a.com:8443" is not in ports`, `ports = [80, 443, 8443]`}},
		{Spec{Deny: []string{" x.com"}}, []string{`deny[0]`, `remove the spaces`}},
		{Spec{AllowCIDRs: []string{"127.0.0.0/8"}}, []string{`allow_cidrs[0] "127.0.0.0/8"`, `hard floor`}},
		{Spec{AllowCIDRs: []string{"10.1.2.3/16"}}, []string{`write "10.1.0.0/16"`}},
		{Spec{Mode: "enforcing"}, []string{`mode "enforcing"`, `unknown mode`}},
		{Spec{Ports: []uint16{0}}, []string{`ports[0]`, `invalid port`}},
	}
	for _, c := range cases {
		_, err := FromSpec("client alice", c.s)
		var se *SpecError
		if !errors.As(err, &se) || len(se.Problems) == 0 {
			t.Errorf("%+v: error %v, want a *SpecError", c.s, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", c.s, err.Error(), w)
			}
		}
	}
	_, err := FromSpec("c", Spec{Allow: []string{"a/b", "ok.com", "*"}, AllowCIDRs: []string{"x"}})
	var se *SpecError
	if !errors.As(err, &se) || len(se.Problems) != 3 {
		t.Fatalf("every problem at once: %v", err)
	}
}
