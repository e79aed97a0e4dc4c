package dispatch

import (
	"context"

	"github.com/postern-dev/postern/records"
)

// newEventLog starts recording a run's events. Events shown live go to
// spec.OnEvent; a failure to store them is told to the person at once, once.
func newEventLog(store *records.Store, run *records.Run, spec Spec) *records.EventLog {
	return store.NewEventLog(run.ID, records.EventLogOptions{Tee: spec.OnEvent, Warn: spec.Warn})
}

// closeEventLog stores what is left of the run's events, within the teardown
// bound, and puts the counts on the run record: the decisions as the door made
// them, and how many events were not stored and why.
func closeEventLog(ctx context.Context, evlog *records.EventLog, run *records.Run) error {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	err := evlog.Close(tctx)
	t := evlog.Tally()
	run.Allowed, run.Denied, run.WouldDeny = t.Allowed, t.Denied, t.WouldDeny
	run.EventsDropped, run.EventsLost = t.Dropped, t.Lost
	if t.Err != nil {
		run.EventsError = t.Err.Error()
	}
	return err
}
