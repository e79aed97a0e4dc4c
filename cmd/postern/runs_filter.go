package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/postern-dev/postern/records"
)

// runFilter is what 'runs list' keeps of the runs.
type runFilter struct {
	machine, state, since string
	limit                 int
}

var runStates = []string{string(records.StateRunning), string(records.StateExited), string(records.StateFailed), string(records.StateRefused), string(records.StateLost), string(records.StateCancelled)}

// parseSince reads --since: a duration back from now ("2h", "30m") or a
// time ("2026-12-01", "2026-12-01T15:04:05Z", "2026-12-01 15:04").
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration back from now (2h, 30m) or a time (2026-12-01, 2026-12-01 15:04, RFC 3339)", s)
}

// apply keeps the runs f asks for, oldest first; with a limit, the newest
// that many.
func (f runFilter) apply(rs []*records.Run, now time.Time) ([]*records.Run, error) {
	if f.state != "" && !contains(runStates, f.state) {
		return nil, fmt.Errorf("--state %q: one of %s", f.state, strings.Join(runStates, ", "))
	}
	if f.limit < 0 {
		return nil, fmt.Errorf("--limit %d: give a number of runs, 1 or more (0 is all)", f.limit)
	}
	var since time.Time
	if f.since != "" {
		var err error
		if since, err = parseSince(f.since, now); err != nil {
			return nil, err
		}
	}
	out := []*records.Run{}
	for _, r := range rs {
		if (f.machine != "" && r.Machine != f.machine) || (f.state != "" && r.State != records.State(f.state)) || (!since.IsZero() && r.StartedAt.Before(since)) {
			continue
		}
		out = append(out, r)
	}
	if f.limit > 0 && len(out) > f.limit {
		out = out[len(out)-f.limit:]
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// durationText is how long a run took, or has been running ("…" after).
func durationText(r *records.Run, now time.Time) string {
	switch {
	case r.State == records.StateRefused:
		return "-"
	case r.EndedAt.IsZero():
		return shortDuration(now.Sub(r.StartedAt)) + "…"
	}
	return shortDuration(r.EndedAt.Sub(r.StartedAt))
}

func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
