package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/postern-dev/postern/dispatch/workspace"
	"github.com/postern-dev/postern/records"
)

// ErrNoWorkspace is a run that took no work along.
var ErrNoWorkspace = errors.New("the run took no workspace")

// WorkspaceDiff is the patch from a run's base to its result (stat: the
// diffstat), from the caller's repository.
func WorkspaceDiff(ctx context.Context, store *records.Store, id string, stat bool) ([]byte, error) {
	r, err := Show(store, id)
	if err != nil {
		return nil, err
	}
	ws := r.Workspace
	switch {
	case ws == nil:
		return nil, fmt.Errorf("run %s: %w", r.ID, ErrNoWorkspace)
	case ws.State == records.WorkspaceUnchanged:
		return nil, fmt.Errorf("run %s changed nothing", r.ID)
	case ws.Result == "":
		return nil, fmt.Errorf("run %s: its result is not home yet (%s): 'postern runs fetch %s'", r.ID, ws.State, r.ID)
	}
	return workspace.Diff(ctx, ws.Repo, ws.Base, ws.Result, stat)
}

// FetchResult brings home the result of a run whose copy is still on its
// machine (a lost run, or one whose fetch failed), then removes the copy
// unless it is to be kept. maxResult, if set, overrides the run's bound.
func FetchResult(ctx context.Context, store *records.Store, id string, r Remote, maxResult int64) (*records.Run, error) {
	run, err := Show(store, id)
	if err != nil {
		return nil, err
	}
	ws := run.Workspace
	switch {
	case ws == nil:
		return run, fmt.Errorf("run %s: %w", run.ID, ErrNoWorkspace)
	case run.State == records.StateRunning:
		return run, fmt.Errorf("run %s is still running: its result comes home when it ends", run.ID)
	case ws.Removed:
		return run, fmt.Errorf("run %s: its copy was removed from %s once its result was home (%s)", run.ID, run.Machine, ws.State)
	}
	if maxResult > 0 {
		ws.MaxResult = maxResult
	}
	if ws.State == records.WorkspaceFetched || ws.State == records.WorkspaceUnchanged {
		// Home already, kept on purpose: fetching again removes the copy.
		ws.Keep = false
	}
	ws.State = records.WorkspaceShipped
	m, err := store.Machine(run.Machine)
	if err != nil {
		return run, err
	}
	if m.IsLocal() {
		return run, fetchWorkspace(ctx, store, run, nil, nil)
	}
	if r.Agents == nil {
		r.Agents = store
	}
	rec, err := store.Record(m.Name)
	if err != nil && !errors.Is(err, records.ErrNotFound) {
		return run, err
	}
	var goos, goarch string
	if rec != nil && rec.OS != "" {
		goos, goarch = rec.OS, rec.Arch
	} else if goos, goarch, err = remotePlatform(ctx, m, r); err != nil {
		return run, err
	}
	sc, _, p, err := connectAgent(ctx, m, goos, goarch, r)
	if err != nil {
		ws.State = records.WorkspaceKept
		return run, err
	}
	defer sc.Close()
	awaitAgent(p)
	p.Close()
	in, err := agentInstall(m, goos, goarch, r.Version)
	if err != nil {
		return run, err
	}
	step := agentStepper(sc, in, m.Name)
	return run, fetchWorkspace(ctx, store, run, step, step)
}

// KeptWorkspaces are the runs on machine whose copies are still there.
func KeptWorkspaces(store *records.Store, machine string) ([]*records.Run, error) {
	runs, err := Runs(store)
	if err != nil {
		return nil, err
	}
	var out []*records.Run
	for _, r := range runs {
		if r.Machine == machine && r.Workspace != nil && r.Workspace.Dir != "" && !r.Workspace.Removed && r.Workspace.State != "" {
			out = append(out, r)
		}
	}
	return out, nil
}
