package dispatch

import (
	"errors"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

// runPolicy is the policy a run's door holds: the file's, or, for a run
// that joins a gateway, one that only gives the wall its ports (the gateway
// judges) and names the gateway, without its credentials, in the record.
func runPolicy(spec Spec) (*policy.Policy, []byte, error) {
	if spec.Upstream == nil {
		return readPolicy(spec.PolicyPath)
	}
	if spec.PolicyPath != "" {
		return nil, nil, errors.New("give --policy or --gateway, not both: with --gateway the gateway judges every connection by the client's policy there")
	}
	p := policy.Nothing()
	p.Source = "gateway " + spec.Upstream.Name
	return p, nil, nil
}

// checkJoin refuses a run that joins a gateway on a lane whose door cannot
// send its connections on yet.
func checkJoin(spec Spec, m machine.Machine, c carry.Carry) error {
	if spec.Upstream == nil {
		return nil
	}
	if !m.IsLocal() || c != carry.NetworkWall || spec.Container.Image != "" {
		return errors.New("--gateway works for runs on this machine behind the network wall; run with --machine local and without --container")
	}
	return nil
}
