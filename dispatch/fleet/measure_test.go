package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestIdealSchedule(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		runs  []time.Duration
		slots int
		want  time.Duration
	}{
		{nil, 4, 0},
		{[]time.Duration{50 * ms}, 0, 0},
		{slices.Repeat([]time.Duration{50 * ms}, 100), 12, 9 * 50 * ms},
		{slices.Repeat([]time.Duration{50 * ms}, 12), 12, 50 * ms},
		{[]time.Duration{30 * ms, 10 * ms, 10 * ms, 10 * ms}, 2, 30 * ms},
		{[]time.Duration{10 * ms, 30 * ms, 30 * ms}, 2, 40 * ms},
	} {
		if got := IdealSchedule(c.runs, c.slots); got != c.want {
			t.Errorf("IdealSchedule(%v, %d) = %s, want %s", c.runs, c.slots, got, c.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	// Two slots, four runs of 10 s: the ideal is 20 s. The dispatch took
	// 24 s: the second pair was placed 2 s late, and ran 2 s longer.
	s := time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := &Record{StartedAt: t0, EndedAt: at(24 * s), State: Ended,
		Machines: []MachineRecord{{Name: "a", Slots: 2, Takes: 4, State: Reachable}},
		Tasks: []TaskRecord{
			{Attempts: []AttemptRecord{{PlacedAt: at(0), EndedAt: at(10 * s)}}},
			{Attempts: []AttemptRecord{{PlacedAt: at(0), EndedAt: at(10 * s)}}},
			{Attempts: []AttemptRecord{{PlacedAt: at(12 * s), EndedAt: at(24 * s)}}},
			{Attempts: []AttemptRecord{{PlacedAt: at(12 * s), EndedAt: at(24 * s)}}},
		}}
	f := Measure(r, slices.Repeat([]time.Duration{10 * s}, 4))
	if f.Slots != 2 || f.Wall != 24*s || f.Ideal != 20*s || f.OverheadPerTask != s || f.QueueFor != 12*s {
		t.Errorf("figures %+v", f)
	}
	// Of the 12 s the queue waited, both slots were in use for 10.
	if want := 20.0 / 24.0; f.Utilisation < want-1e-9 || f.Utilisation > want+1e-9 {
		t.Errorf("utilisation %f, want %f", f.Utilisation, want)
	}
}

// fakeRun starts at once and ends after d, by a real timer: the fake run of
// the benchmarks, so that what is measured is the dispatch itself.
func fakeRun(d time.Duration) func(context.Context, Attempt, func(RunEvent)) {
	return func(ctx context.Context, a Attempt, report func(RunEvent)) {
		report(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: fmt.Sprint(a.ID)})
		if d == 0 {
			report(RunEvent{Attempt: a.ID, Kind: RunExited})
			return
		}
		done := make(chan struct{})
		tm := time.AfterFunc(d, func() { close(done) })
		select {
		case <-done:
		case <-ctx.Done():
			tm.Stop()
		}
		report(RunEvent{Attempt: a.ID, Kind: RunExited})
	}
}

func measureDispatch(tb testing.TB, tasks, machines, perMachine int, run time.Duration) Figures {
	tb.Helper()
	f := tasksFile(tb, fmt.Sprintf("per_machine = %d", perMachine), tasks)
	var ms []Machine
	for i := range machines {
		ms = append(ms, walled(fmt.Sprintf("m%d", i)))
	}
	r := newFakeRunner(fakeRun(run))
	rec, err := Run(context.Background(), Config{File: f, Runner: r, Machines: ms})
	if err != nil {
		tb.Fatal(err)
	}
	r.wg.Wait()
	if rec.Summary.Exited != tasks {
		tb.Fatalf("summary %+v", rec.Summary)
	}
	return Measure(rec, slices.Repeat([]time.Duration{run}, tasks))
}

// TestDispatchOverheadWithFakeRuns holds the dispatch itself (with runs
// that cost nothing) well inside the goals the real one is held to: at most
// 50 ms of overhead per task, and slots at least 90 % in use while tasks
// wait.
func TestDispatchOverheadWithFakeRuns(t *testing.T) {
	f := measureDispatch(t, 100, 3, 4, 50*time.Millisecond)
	t.Log(f)
	if f.Slots != 12 || f.OverheadPerTask > 5*time.Millisecond || f.Utilisation < 0.9 {
		t.Errorf("%s: want at most 5 ms per task and at least 90%% in use", f)
	}
}

// BenchmarkDispatch measures the dispatch's own cost: 100 tasks on 3
// machines of 4 slots, with fake runs of 0 and 50 ms. It reports the
// overhead per task (wall time minus the ideal schedule) and the slots'
// utilisation while the queue is non-empty, the figures the real runs are
// compared with (xargs -P, GNU parallel).
func BenchmarkDispatch(b *testing.B) {
	for _, run := range []time.Duration{0, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("tasks=100,machines=3,per_machine=4,run=%s", run), func(b *testing.B) {
			var over []time.Duration
			var util []float64
			for b.Loop() {
				f := measureDispatch(b, 100, 3, 4, run)
				over = append(over, f.OverheadPerTask)
				util = append(util, f.Utilisation)
			}
			slices.Sort(over)
			slices.Sort(util)
			b.ReportMetric(float64(over[len(over)/2].Nanoseconds())/1e3, "µs-overhead/task")
			b.ReportMetric(100*util[len(util)/2], "%-slots-in-use")
		})
	}
}
