package dispatch

import (
	"fmt"
	"slices"
	"strings"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
)

// withoutInjected is env without the variables the policy's inject_header
// entries read: their values are postern's, for the door to add to requests,
// and never the run's.
func withoutInjected(env []string, pol *policy.Policy) []string {
	if pol == nil {
		return env
	}
	vars := pol.InjectEnv()
	if len(vars) == 0 {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(vars, k)
	})
}

// inspectAuthority makes the run's certificate authority when the policy
// inspects hosts (nil when it inspects none): the door signs with it, and
// the wall has the run trust it.
func inspectAuthority(pol *policy.Policy) (*door.Authority, error) {
	if pol == nil || len(pol.Inspect) == 0 {
		return nil, nil
	}
	hosts := make([]string, 0, len(pol.Inspect))
	for _, r := range pol.Inspect {
		hosts = append(hosts, r.Host)
	}
	ca, err := door.NewAuthority(hosts)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return ca, nil
}
