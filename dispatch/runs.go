package dispatch

import (
	"strconv"
	"time"

	"github.com/postern-dev/postern/records"
)

// Reconcile marks a running run whose controller is gone as lost, durably, and
// returns it. Runs in other states are returned as they are.
func Reconcile(store *records.Store, r *records.Run) (*records.Run, error) {
	if r.State != records.StateRunning || controllerAlive(r.Pid, r.PidStart) {
		return r, nil
	}
	r.State = records.StateLost
	r.End = records.EndLost
	r.EndedAt = time.Now().UTC()
	r.Why = "the controller (pid " + strconv.Itoa(r.Pid) + ") ended without finishing the run"
	return r, store.PutRun(r)
}

// Runs lists every run, oldest first, with lost runs marked. A lost run
// whose mark cannot be written (the records read-only or full) is listed as
// lost all the same, and marked by a later listing.
func Runs(store *records.Store) ([]*records.Run, error) {
	runs, err := store.Runs()
	if err != nil {
		return nil, err
	}
	for i, r := range runs {
		runs[i], _ = Reconcile(store, r)
	}
	return runs, nil
}

// Show returns one run (a unique id prefix is enough), with a lost run marked.
func Show(store *records.Store, id string) (*records.Run, error) {
	r, err := store.Run(id)
	if err != nil {
		return nil, err
	}
	return Reconcile(store, r)
}
