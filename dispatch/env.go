package dispatch

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

// EnvError is an --env the run cannot be given: a bad name, a name not set
// in postern's environment, or one the policy keeps from the run. It names
// the variable, never its value.
type EnvError struct {
	Name string
	Why  string
}

func (e *EnvError) Error() string { return fmt.Sprintf("--env %s: %s", e.Name, e.Why) }

// passedEnv resolves the variables a run is given on top of what its lane
// passes by itself: the machine's env names, then the person's --env
// entries (which win). An entry is "NAME=VALUE", or "NAME" for NAME's value
// in env (postern's own environment). A name the machine declares that is
// not set here is left out, and the person told. It returns the variables
// as "NAME=VALUE", one per name in the order first given, and their names.
func passedEnv(pass []string, m machine.Machine, env []string, pol *policy.Policy, warn io.Writer) (vars, names []string, err error) {
	var injected []string
	if pol != nil {
		injected = pol.InjectEnv()
	}
	// Checked before the name is looked up: postern's environment no longer
	// holds what the door injects, and "not set" would send the person the
	// wrong way.
	keptFromRun := func(name string) error {
		if slices.Contains(injected, name) {
			return &EnvError{Name: name, Why: fmt.Sprintf("the policy %s injects %s into requests for the run, which never holds it: leave it out", policyName(pol), name)}
		}
		return nil
	}
	values := map[string]string{}
	set := func(name, value string) {
		if _, ok := values[name]; !ok {
			names = append(names, name)
		}
		values[name] = value
	}
	for _, name := range m.Env {
		if err := machine.CheckEnvName(name); err != nil {
			k, _, _ := strings.Cut(name, "=") // what follows '=' may be a value
			return nil, nil, &EnvError{Name: k, Why: fmt.Sprintf("machine %s: %v", m.Name, err)}
		}
		if err := keptFromRun(name); err != nil {
			return nil, nil, err
		}
		v, ok := lookupEnv(env, name)
		if !ok {
			fmt.Fprintf(warn, "postern: machine %s passes %s to its runs, but %s is not set here: the run goes without it\n", m.Name, name, name)
			continue
		}
		set(name, v)
	}
	for _, e := range pass {
		name, value, given := strings.Cut(e, "=")
		if err := machine.CheckEnvName(name); err != nil {
			return nil, nil, &EnvError{Name: name, Why: err.Error() + "; give --env NAME or --env NAME=VALUE"}
		}
		if err := keptFromRun(name); err != nil {
			return nil, nil, err
		}
		if strings.IndexByte(value, 0) >= 0 {
			return nil, nil, &EnvError{Name: name, Why: "the value holds a NUL byte, which no environment can carry"}
		}
		if !given {
			v, ok := lookupEnv(env, name)
			if !ok {
				return nil, nil, &EnvError{Name: name, Why: fmt.Sprintf("%s is not set in postern's environment: export it, or give --env %s=VALUE", name, name)}
			}
			value = v
		}
		set(name, value)
	}
	for _, n := range names {
		vars = append(vars, n+"="+values[n])
	}
	return vars, names, nil
}

// lookupEnv is name's value in env; the last of several wins, as in exec.
func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// withEnv is env with vars set: each replaces every earlier entry of its
// name, so the run sees exactly one value.
func withEnv(env, vars []string) []string {
	if len(vars) == 0 {
		return env
	}
	drop := map[string]bool{}
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

// EnvPairs is a map of variables as Spec.PassEnv takes them, "NAME=VALUE"
// sorted by name: a tasks file's env for each of its runs.
func EnvPairs(vars map[string]string) []string {
	names := slices.Sorted(maps.Keys(vars))
	out := make([]string, 0, len(names))
	for _, k := range names {
		out = append(out, k+"="+vars[k])
	}
	return out
}
