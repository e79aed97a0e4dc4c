package dispatch

import (
	"fmt"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

// PolicyFromRun writes the enforce policy that allows what run id reached
// (see policy.FromEvents), checked to load as the door would load it.
func PolicyFromRun(store *records.Store, id string) (string, error) {
	run, err := Show(store, id)
	if err != nil {
		return "", err
	}
	var evs []event.Event
	for after := uint64(0); ; {
		batch, next, err := store.Events(run.ID, after)
		if err != nil {
			return "", err
		}
		evs = append(evs, batch...)
		if next == after {
			break
		}
		after = next
	}
	src := policy.FromEvents(policy.Origin{Run: run.ID, Machine: run.Machine, Mode: run.Mode, Command: run.Command, At: time.Now()}, evs)
	// What is printed must load as a policy: check it as the door would.
	if _, err := policy.Parse("from-run.hcl", []byte(src)); err != nil {
		return "", fmt.Errorf("the policy written from run %s does not load (%v):\n%s", run.ID, err, src)
	}
	return src, nil
}
