package gateway

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door/policy"
)

func TestParseProxyAuthorization(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		in, name, token, problem string
	}{
		{"Basic " + b64("alice:tok"), "alice", "tok", ""},
		{"basic  " + b64("alice:tok:with:colons"), "alice", "tok:with:colons", ""},
		{"", "", "", authMissing},
		{"Bearer xyz", "", "", authMalformed},
		{"Basic !!!", "", "", authMalformed},
		{"Basic " + b64("alice"), "", "", authMalformed},
		{"Basic " + b64("alice:"), "alice", "", authMalformed},
		{"Basic " + b64("a b:tok"), "", "", authMalformed},
		{"Basic " + b64(":tok"), "", "", authMalformed},
	}
	for _, c := range cases {
		name, tok, err := ParseProxyAuthorization(c.in)
		var pe *ProxyAuthError
		switch {
		case c.problem == "" && (err != nil || name != c.name || tok != c.token):
			t.Errorf("%q: %q %q %v", c.in, name, tok, err)
		case c.problem != "" && (!errors.As(err, &pe) || pe.Problem != c.problem):
			t.Errorf("%q: error %v, want problem %q", c.in, err, c.problem)
		}
	}
}

func FuzzParseProxyAuthorization(f *testing.F) {
	for _, s := range []string{"", "Basic YWxpY2U6dG9r", "basic Og==", "Basic", "Basic YTpi\x00", "Digest x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		name, tok, err := ParseProxyAuthorization(v)
		if err != nil {
			var pe *ProxyAuthError
			if !errors.As(err, &pe) || pe.Problem == "" {
				t.Fatalf("%q: untyped error %v", v, err)
			}
			return
		}
		if CheckName(name) != nil || tok == "" {
			t.Fatalf("%q: accepted name %q token %q", v, name, tok)
		}
		if strings.ContainsAny(name, ":\r\n ") {
			t.Fatalf("%q: name %q", v, name)
		}
	})
}

func TestPolicyPatchAppliesAsSets(t *testing.T) {
	p, err := ParsePolicyPatch([]byte(`{"mode": "observe", "add_allow": ["b.test", "a.test"], "remove_allow": ["c.test"], "add_deny": ["x.a.test"], "ports": [443, 80, 8443]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := policy.Spec{Mode: "enforce", Ports: []uint16{80, 443}, Allow: []string{"a.test", "c.test"}}
	got := p.Apply(base)
	if got.Mode != "observe" || !slices.Equal(got.Allow, []string{"a.test", "b.test"}) || !slices.Equal(got.Deny, []string{"x.a.test"}) ||
		!slices.Equal(got.Ports, []uint16{443, 80, 8443}) {
		t.Fatalf("applied: %+v", got)
	}
	if !slices.Equal(base.Allow, []string{"a.test", "c.test"}) {
		t.Fatalf("base changed: %+v", base)
	}
	if again := p.Apply(got); !slices.Equal(again.Allow, got.Allow) || !slices.Equal(again.Deny, got.Deny) {
		t.Fatalf("applying twice changed it: %+v", again)
	}
}

func TestParsePolicyPatchErrors(t *testing.T) {
	for in, want := range map[string]string{
		`[]`:                       "not one JSON object",
		`{"add_allow": ["a"]} {}`:  "more than one JSON value",
		`{"remove_cidrs": [1]}`:    `field "remove_cidrs": write a list of strings`,
		`{"ports": [0]}`:           "0 is not a port",
		`{"ports": [1.5]}`:         "1.5 is not a port",
		`{"ports": "80"}`:          "write a list of port numbers",
		`{"mode": 1}`:              `field "mode"`,
		`{"allow": ["a"]}`:         `unknown field "allow"; a policy patch has only mode, add_allow`,
		`{"add_allow": null}`:      "write a list of strings",
		`{"add_allow": ["a", 2]}`:  "write a list of strings",
		``:                         "not one JSON object",
		`{"add_allow": ["a"], "x"`: "not one JSON object",
	} {
		_, err := ParsePolicyPatch([]byte(in))
		var be *BadRequestError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a *BadRequestError with %q", in, err, want)
		}
	}
}

func FuzzParsePolicyPatch(f *testing.F) {
	for _, s := range []string{
		`{"add_allow": ["github.com"]}`, `{"mode": "observe", "ports": [80]}`, `{}`, `null`, `{"ports": [65536]}`,
		`{"add_cidrs": ["10.0.0.0/8"], "remove_deny": ["x"]}`, `{"add_allow": ["\u0000"]}`,
	} {
		f.Add([]byte(s))
	}
	base := policy.Spec{Mode: "enforce", Ports: []uint16{80, 443}, Allow: []string{"a.test"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicyPatch(data)
		if err != nil {
			var be *BadRequestError
			if !errors.As(err, &be) {
				t.Fatalf("%q: untyped error %v", data, err)
			}
			return
		}
		s := p.Apply(base)
		for _, port := range s.Ports {
			if port == 0 {
				t.Fatalf("%q: port 0 accepted", data)
			}
		}
		// Whatever a patch says, compiling it either succeeds or names
		// what is wrong; it never panics, and never opens the floor.
		pol, err := policy.FromSpec("fuzz", s)
		if err != nil {
			var se *policy.SpecError
			if !errors.As(err, &se) || len(se.Problems) == 0 {
				t.Fatalf("%q: compile error %v", data, err)
			}
			return
		}
		for _, a := range []string{"127.0.0.1", "169.254.169.254", "::1"} {
			if d := pol.DecideAddr(mustAddr(a), 443, ""); d.Verdict == policy.Allow {
				t.Fatalf("%q: opened %s: %+v", data, a, d)
			}
		}
	})
}
