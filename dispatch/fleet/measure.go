package fleet

import (
	"fmt"
	"slices"
	"time"
)

// Figures are what a dispatch cost beyond its runs: the measure its
// benchmarks hold it to.
type Figures struct {
	Tasks int
	// Slots are the slots the dispatch could fill at once.
	Slots int
	// Wall is the dispatch's start to its end.
	Wall time.Duration
	// Ideal is the same runs placed in file order on the same slots, each
	// the moment a slot is free, and costing nothing but their own time.
	Ideal time.Duration
	// OverheadPerTask is (Wall - Ideal) / Tasks.
	OverheadPerTask time.Duration
	// QueueFor is how long tasks waited for slots: the dispatch's start to
	// its last placement.
	QueueFor time.Duration
	// Utilisation is the share of the slots' time in use while tasks
	// waited: a slot is in use from its placement to its run's end.
	Utilisation float64
}

func (f Figures) String() string {
	return fmt.Sprintf("%d tasks on %d slots: wall %s, ideal %s, overhead %s per task, slots %.1f%% in use while the queue was non-empty (%s)",
		f.Tasks, f.Slots, f.Wall.Round(time.Microsecond), f.Ideal.Round(time.Microsecond), f.OverheadPerTask.Round(time.Microsecond),
		100*f.Utilisation, f.QueueFor.Round(time.Microsecond))
}

// Measure computes a finished dispatch's figures. runs holds each task's own
// run time in file order (what the command takes run alone, directly), from
// which the ideal schedule is made.
func Measure(r *Record, runs []time.Duration) Figures {
	_, slots := r.Slots()
	f := Figures{Tasks: len(r.Tasks), Slots: slots, Wall: r.EndedAt.Sub(r.StartedAt)}
	f.Ideal = IdealSchedule(runs, slots)
	if f.Tasks > 0 {
		f.OverheadPerTask = (f.Wall - f.Ideal) / time.Duration(f.Tasks)
	}
	queueEnd := r.StartedAt
	for _, t := range r.Tasks {
		for _, a := range t.Attempts {
			if a.PlacedAt.After(queueEnd) {
				queueEnd = a.PlacedAt
			}
		}
	}
	f.QueueFor = queueEnd.Sub(r.StartedAt)
	if f.QueueFor <= 0 || slots == 0 {
		f.Utilisation = 1
		return f
	}
	var busy time.Duration
	for _, t := range r.Tasks {
		for _, a := range t.Attempts {
			from, to := a.PlacedAt, a.EndedAt
			if to.IsZero() || to.After(queueEnd) {
				to = queueEnd
			}
			if from.Before(r.StartedAt) {
				from = r.StartedAt
			}
			if to.After(from) {
				busy += to.Sub(from)
			}
		}
	}
	f.Utilisation = float64(busy) / float64(time.Duration(slots)*f.QueueFor)
	return f
}

// IdealSchedule is how long runs take in file order on slots slots, each
// started the moment a slot is free, with no cost between them.
func IdealSchedule(runs []time.Duration, slots int) time.Duration {
	if slots <= 0 || len(runs) == 0 {
		return 0
	}
	free := make([]time.Duration, min(slots, len(runs)))
	var end time.Duration
	for _, d := range runs {
		i := slices.Index(free, slices.Min(free))
		free[i] += d
		end = max(end, free[i])
	}
	return end
}
