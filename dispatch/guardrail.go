package dispatch

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

// guardrailDial bounds the connect that tells whether a guardrail is up.
const guardrailDial = 500 * time.Millisecond

// guardrailEnv are the variables that point a run at its policy's
// guardrails: POSTERN_GUARDRAIL_<NAME>_URL and each variable the guardrail
// names, set to the URL the run reaches it at. direct, for a run with no door
// (an open network), gives the guardrail's own address instead.
func guardrailEnv(pol *policy.Policy, direct bool) []string {
	var env []string
	for i := range pol.Guardrails {
		g := &pol.Guardrails[i]
		url := g.URL(i)
		if direct {
			url = "http://" + g.Address.String()
		}
		env = append(env, g.EnvName()+"="+url)
		for _, name := range g.Env {
			env = append(env, name+"="+url)
		}
	}
	return env
}

// withGuardrails is env with the guardrails' variables set (replacing any the
// caller had).
func withGuardrails(env []string, pol *policy.Policy, direct bool) []string {
	add := guardrailEnv(pol, direct)
	if len(add) == 0 {
		return env
	}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(add, func(a string) bool { return strings.HasPrefix(a, name+"=") })
	})
	return append(out, add...)
}

// guardrailPorts are the ports the run reaches its guardrails on: the wall
// sends them to the door, which forwards them to the guardrails.
func guardrailPorts(pol *policy.Policy) []uint16 {
	var ports []uint16
	for _, g := range pol.Guardrails {
		if p := g.Address.Port(); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// wallPorts are the TCP ports the wall sends to the door: the policy's and
// its guardrails'.
func wallPorts(pol *policy.Policy) []uint16 {
	ports := slices.Clone(pol.Ports)
	for _, p := range guardrailPorts(pol) {
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// sealOf is whether the policy's guardrail seal holds for a run: nil when the
// policy has no guardrail. notHere, when set, is why the run's lane cannot
// seal (the run is pointed at the guardrails, not forced through them);
// otherwise the seal holds if every guardrail answers a TCP connect at its
// address on this machine now.
func sealOf(ctx context.Context, pol *policy.Policy, notHere string) *records.Seal {
	if len(pol.Guardrails) == 0 {
		return nil
	}
	names := make([]string, len(pol.Guardrails))
	for i, g := range pol.Guardrails {
		names[i] = g.Name
	}
	s := &records.Seal{Guardrail: strings.Join(names, ",")}
	if notHere != "" {
		s.Why = notHere
		return s
	}
	var down []string
	for _, g := range pol.Guardrails {
		dctx, cancel := context.WithTimeout(ctx, guardrailDial)
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", g.Address.String())
		cancel()
		if err != nil {
			down = append(down, fmt.Sprintf("guardrail %s did not answer at %s (%v)", g.Name, g.Address, err))
			continue
		}
		c.Close()
	}
	if len(down) > 0 {
		s.Why = strings.Join(down, "; ") + "; its hosts stay denied"
		return s
	}
	s.Held = true
	return s
}

// Why a lane does not seal.
const (
	sealNotContainer = "container runs are not sealed: the run is pointed at its guardrails, and the policy's other rules apply to the sealed hosts"
	sealNotMacOS     = "the macOS connect door does not seal: the run is pointed at its guardrails, and the policy's other rules apply to the sealed hosts"
	sealNotOpen      = "the run's network is open (--egress-open): it is pointed at its guardrails, nothing more"
	sealNotNetwork   = "the run has no network (--network none)"
)

// warnSeal tells the person at the start when a policy's seal did not hold.
func warnSeal(w interface{ Write([]byte) (int, error) }, run string, s *records.Seal) {
	if s != nil && !s.Held {
		fmt.Fprintf(w, "postern: WARNING: run %s: the guardrail seal (%s) is not held: %s\n", run, s.Guardrail, s.Why)
	}
}
