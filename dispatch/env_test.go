package dispatch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

func TestPassedEnv(t *testing.T) {
	here := []string{"HOME=/root", "TOKEN=from-here", "EMPTY=", "TOKEN=later-wins", "MACHINE_KEY=mk"}
	m := machine.Machine{Name: "gpu1", Env: []string{"MACHINE_KEY", "NOT_SET_HERE"}}
	var warn bytes.Buffer
	vars, names, err := passedEnv([]string{"TOKEN", "A=b=c", "EMPTY", "MACHINE_KEY=overridden", "A=second"}, m, here, nil, &warn)
	if err != nil {
		t.Fatal(err)
	}
	wantVars := []string{"MACHINE_KEY=overridden", "TOKEN=later-wins", "A=second", "EMPTY="}
	wantNames := []string{"MACHINE_KEY", "TOKEN", "A", "EMPTY"}
	if !slices.Equal(vars, wantVars) || !slices.Equal(names, wantNames) {
		t.Errorf("vars %q names %q, want %q %q", vars, names, wantVars, wantNames)
	}
	if got := warn.String(); !strings.Contains(got, "machine gpu1 passes NOT_SET_HERE") || strings.Contains(got, "mk") {
		t.Errorf("warning %q: want the unset name named, and no value", got)
	}

	for _, c := range []struct {
		pass []string
		m    machine.Machine
		want string
	}{
		{[]string{"UNSET"}, machine.Machine{}, "UNSET is not set in postern's environment"},
		{[]string{"=value"}, machine.Machine{}, "the name is empty"},
		{[]string{"A B=1"}, machine.Machine{}, "bad environment variable name"},
		{[]string{"A=x\x00y"}, machine.Machine{}, "NUL"},
		{nil, machine.Machine{Name: "m", Env: []string{"X=secret"}}, "machine m"},
	} {
		_, _, err := passedEnv(c.pass, c.m, here, nil, &warn)
		var ee *EnvError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("passedEnv(%q, %v): %v, want an *EnvError saying %q", c.pass, c.m.Env, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "from-here")) {
			t.Errorf("the error %q holds a value", err)
		}
	}
}

// A variable the policy injects into requests is the door's: the run may
// not be given it by --env either.
func TestPassedEnvRefusesWhatThePolicyInjects(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.hcl")
	src := `mode = "enforce"
ports = [443]
allow = ["api.example.test"]
inspect "api.example.test" {
  inject_header = { "Authorization" = "env:API_TOKEN" }
}
`
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.InjectEnv()) == 0 {
		t.Fatalf("the policy injects nothing: %+v", pol.InjectEnv())
	}
	// Given a value, by name (postern's environment no longer holds it by
	// then), or by the machine: each refused as what the policy injects.
	for _, c := range []struct {
		pass []string
		m    machine.Machine
	}{
		{[]string{"API_TOKEN=x"}, machine.Machine{}},
		{[]string{"API_TOKEN"}, machine.Machine{}},
		{nil, machine.Machine{Name: "m", Env: []string{"API_TOKEN"}}},
	} {
		_, _, err = passedEnv(c.pass, c.m, withoutInjected([]string{"API_TOKEN=tok"}, pol), pol, &bytes.Buffer{})
		var ee *EnvError
		if !errors.As(err, &ee) || ee.Name != "API_TOKEN" || !strings.Contains(err.Error(), "injects API_TOKEN") {
			t.Errorf("passedEnv(%q, %v): %v, want an *EnvError saying the policy injects API_TOKEN", c.pass, c.m.Env, err)
		}
	}
}

func TestWithEnv(t *testing.T) {
	got := withEnv([]string{"A=1", "B=2", "A=3", "C=4"}, []string{"A=new", "D=5"})
	want := []string{"B=2", "C=4", "A=new", "D=5"}
	if !slices.Equal(got, want) {
		t.Errorf("withEnv = %q, want %q", got, want)
	}
}

func TestEnvPairs(t *testing.T) {
	got := EnvPairs(map[string]string{"B": "2", "A": "x=y", "C": "", "A1": "1"})
	if want := []string{"A=x=y", "A1=1", "B=2", "C="}; !slices.Equal(got, want) {
		t.Errorf("EnvPairs = %q, want %q", got, want)
	}
	vars, names, err := passedEnv(got, machine.Machine{}, nil, nil, &bytes.Buffer{})
	if err != nil || !slices.Equal(vars, got) || !slices.Equal(names, []string{"A", "A1", "B", "C"}) {
		t.Errorf("passedEnv(EnvPairs(...)) = %q, %q, %v", vars, names, err)
	}
}
