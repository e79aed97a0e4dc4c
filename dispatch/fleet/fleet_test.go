package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type started struct {
	ctx    context.Context
	a      Attempt
	report func(RunEvent)
}

// fakeRunner starts attempts as behave says, each in a goroutine of its own
// that it owns (Wait). It counts the runs each machine has at once, as a
// machine would see them: a run counts from Start until just before its end
// is reported.
type fakeRunner struct {
	behave func(ctx context.Context, a Attempt, report func(RunEvent))
	// inline calls behave inside Start, before it returns.
	inline bool
	starts chan started

	mu   sync.Mutex
	live map[string]int
	peak map[string]int
	wg   sync.WaitGroup
}

func newFakeRunner(behave func(ctx context.Context, a Attempt, report func(RunEvent))) *fakeRunner {
	return &fakeRunner{behave: behave, starts: make(chan started, 10000), live: map[string]int{}, peak: map[string]int{}}
}

func (r *fakeRunner) Start(ctx context.Context, a Attempt, report func(RunEvent)) {
	name := a.Machine.Name
	r.mu.Lock()
	r.live[name]++
	r.peak[name] = max(r.peak[name], r.live[name])
	r.mu.Unlock()
	var once sync.Once
	wrapped := func(ev RunEvent) {
		switch ev.Kind {
		case RunExited, RunFailed, RunLost:
			once.Do(func() {
				r.mu.Lock()
				r.live[name]--
				r.mu.Unlock()
			})
		}
		report(ev)
	}
	r.starts <- started{ctx, a, wrapped}
	if r.inline {
		r.behave(ctx, a, wrapped)
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.behave(ctx, a, wrapped)
	}()
}

func (r *fakeRunner) Wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner's goroutines did not end")
	}
}

// exitAt0 starts and exits 0 at once.
func exitAt0(_ context.Context, a Attempt, report func(RunEvent)) {
	report(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: fmt.Sprintf("r%d", a.ID)})
	report(RunEvent{Attempt: a.ID, Kind: RunExited, Code: 0, Branch: fmt.Sprintf("postern/r%d", a.ID)})
}

// untilStopped starts and runs until its context is cancelled, then exits
// as a run killed by SIGTERM does.
func untilStopped(ctx context.Context, a Attempt, report func(RunEvent)) {
	report(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: fmt.Sprintf("r%d", a.ID)})
	<-ctx.Done()
	report(RunEvent{Attempt: a.ID, Kind: RunExited, Code: 143})
}

func tasksFile(t testing.TB, head string, n int) *File {
	t.Helper()
	var src strings.Builder
	src.WriteString(head + "\n")
	for i := range n {
		fmt.Fprintf(&src, "task \"t%03d\" { command = [\"true\"] }\n", i)
	}
	return mustParse(t, src.String())
}

func receive(t *testing.T, ch <-chan started, n int) []started {
	t.Helper()
	var out []started
	for len(out) < n {
		select {
		case s := <-ch:
			out = append(out, s)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d starts, want %d", len(out), n)
		}
	}
	return out
}

func TestRunHundredTasksOverThreeMachines(t *testing.T) {
	f := tasksFile(t, "per_machine = 4", 100)
	r := newFakeRunner(exitAt0)
	var changes []Change
	var jsonOut bytes.Buffer
	rec, err := Run(context.Background(), Config{ID: "d1", File: f, Runner: r,
		Machines: []Machine{walled("a"), walled("b"), walled("c")},
		OnChange: func(c Change, _ *Record) {
			changes = append(changes, c)
			jsonOut.Write(JSONLine(c))
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.Wait(t)
	if rec.State != Ended || ExitCode(rec) != 0 || rec.Summary.Exited != 100 || rec.Summary.Attempts != 100 {
		t.Fatalf("record %s, summary %+v", rec.State, rec.Summary)
	}
	for name, n := range r.peak {
		if n > 4 {
			t.Errorf("machine %s ran %d at once, per_machine 4", name, n)
		}
	}
	if len(r.starts) != 100 {
		t.Errorf("%d starts", len(r.starts))
	}
	// Every change is one JSON object on a line of its own, and every task's
	// changes go queued, starting, running, exited.
	byTask := map[string][]State{}
	dec := json.NewDecoder(&jsonOut)
	for i := 0; ; i++ {
		var c Change
		if err := dec.Decode(&c); err != nil {
			if i != len(changes) {
				t.Fatalf("decoded %d JSON lines of %d changes: %v", i, len(changes), err)
			}
			break
		}
		if c.Dispatch != "d1" || c.Time.IsZero() {
			t.Fatalf("change %+v", c)
		}
		if c.Event == EventTask {
			byTask[c.Task] = append(byTask[c.Task], c.State)
		}
	}
	for _, task := range rec.Tasks {
		if got := fmt.Sprint(byTask[task.Name]); got != "[queued starting running exited]" {
			t.Fatalf("task %s went %s", task.Name, got)
		}
	}
	if first, last := changes[0], changes[len(changes)-1]; first.Event != EventDispatch || first.State != Running ||
		last.Event != EventDispatch || last.State != Ended || *last.Exit != 0 {
		t.Errorf("first change %+v, last %+v", first, last)
	}
}

func TestRunCancelStopsRunsAndStartsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	f := tasksFile(t, "per_machine = 2", 20)
	r := newFakeRunner(untilStopped)
	clock := newFakeClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rec *Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := Run(ctx, Config{File: f, Runner: r, Clock: clock, Machines: []Machine{walled("a"), walled("b"), walled("c")}})
		done <- result{rec, err}
	}()
	receive(t, r.starts, 6)
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	r.Wait(t)
	rec := res.rec
	if rec.State != Cancelled || ExitCode(rec) != 130 {
		t.Fatalf("dispatch %s, exit %d", rec.State, ExitCode(rec))
	}
	ran, never := 0, 0
	for _, task := range rec.Tasks {
		switch {
		case task.State == Cancelled && len(task.Attempts) == 1 && *task.Attempts[0].Exit == 143 && task.Why == "cancelled; stopped":
			ran++
		case task.State == Cancelled && len(task.Attempts) == 0 && task.Why == "cancelled before it started":
			never++
		default:
			t.Errorf("task %s: %+v", task.Name, task)
		}
	}
	if ran != 6 || never != 14 || len(r.starts) != 0 {
		t.Errorf("%d stopped, %d never started, %d starts after the cancel", ran, never, len(r.starts))
	}
	noLeak(t, before)
}

// A runner that does not confirm its stops holds a cancelled dispatch for
// the grace only.
func TestRunCancelGrace(t *testing.T) {
	f := tasksFile(t, "", 3)
	release := make(chan struct{})
	r := newFakeRunner(func(ctx context.Context, a Attempt, report func(RunEvent)) {
		report(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: "r"})
		<-release
		report(RunEvent{Attempt: a.ID, Kind: RunExited, Code: 0})
	})
	clock := newFakeClock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Record, 1)
	go func() {
		rec, _ := Run(ctx, Config{File: f, Runner: r, Clock: clock, Machines: []Machine{walled("a"), walled("b")}})
		done <- rec
	}()
	receive(t, r.starts, 2)
	cancel()
	if d := <-clock.armed; d != DefaultStopGrace {
		t.Fatalf("timer of %s armed, want the grace", d)
	}
	select {
	case <-done:
		t.Fatal("Run returned before the grace was over")
	default:
	}
	clock.Advance(DefaultStopGrace)
	rec := <-done
	close(release) // late ends are dropped
	r.Wait(t)
	for _, task := range rec.Tasks[:2] {
		if task.State != Cancelled || task.Why != "cancelled; its stop was not confirmed within 5s" {
			t.Errorf("task %s: %+v", task.Name, task)
		}
	}
	if rec.Tasks[2].State != Cancelled || len(rec.Tasks[2].Attempts) != 0 {
		t.Errorf("queued task: %+v", rec.Tasks[2])
	}
}

func TestRunTimeout(t *testing.T) {
	f := mustParse(t, "task \"slow\" {\n  command = [\"sleep\", \"1000\"]\n  timeout = \"30s\"\n}\ntask \"quick\" { command = [\"true\"] }")
	r := newFakeRunner(func(ctx context.Context, a Attempt, report func(RunEvent)) {
		if a.Task.Name == "quick" {
			exitAt0(ctx, a, report)
			return
		}
		untilStopped(ctx, a, report)
	})
	clock := newFakeClock()
	done := make(chan *Record, 1)
	running := make(chan struct{}, 1)
	go func() {
		rec, _ := Run(context.Background(), Config{File: f, Runner: r, Clock: clock, Machines: []Machine{walled("a"), walled("b")},
			OnChange: func(c Change, _ *Record) {
				if c.Task == "slow" && c.State == Running {
					running <- struct{}{}
				}
			}})
		done <- rec
	}()
	receive(t, r.starts, 2)
	if d := <-clock.armed; d != 30*time.Second {
		t.Fatalf("timer of %s armed, want the task's timeout", d)
	}
	<-running
	clock.Advance(30 * time.Second)
	rec := <-done
	r.Wait(t)
	slow := rec.Tasks[0]
	if slow.State != Failed || slow.Why != "timed out after 30s; stopped" || *slow.Exit != 143 || attemptDur(&slow.Attempts[0]) != 30*time.Second {
		t.Errorf("slow: %+v", slow)
	}
	if rec.Tasks[1].State != Exited || ExitCode(rec) != 1 {
		t.Errorf("quick: %+v, exit %d", rec.Tasks[1], ExitCode(rec))
	}
}

func TestRunLossPlacesAgain(t *testing.T) {
	f := tasksFile(t, "per_machine = 2", 12)
	var lostOnce sync.Once
	lost := make(chan struct{})
	r := newFakeRunner(func(ctx context.Context, a Attempt, report func(RunEvent)) {
		report(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: fmt.Sprintf("r%d", a.ID)})
		if a.Machine.Name == "b" {
			lostOnce.Do(func() { close(lost) })
			report(RunEvent{Attempt: a.ID, Kind: RunLost, Err: errors.New("ssh: unexpected EOF")})
			return
		}
		<-lost // the others end once b is gone, so its runs are lost mid-dispatch
		report(RunEvent{Attempt: a.ID, Kind: RunExited})
	})
	rec, err := Run(context.Background(), Config{File: f, Runner: r, Machines: []Machine{walled("a"), walled("b")}})
	if err != nil {
		t.Fatal(err)
	}
	r.Wait(t)
	if rec.Machines[1].State != Unreachable || rec.Machines[1].Why != "ssh: unexpected EOF" {
		t.Errorf("machine b: %+v", rec.Machines[1])
	}
	again := 0
	for _, task := range rec.Tasks {
		if task.State != Exited || task.Attempts[len(task.Attempts)-1].Machine != "a" {
			t.Errorf("task %s: %+v", task.Name, task)
		}
		if len(task.Attempts) == 2 {
			again++
		}
	}
	if again != 2 || ExitCode(rec) != 0 {
		t.Errorf("%d placed again (want the 2 on b), exit %d", again, ExitCode(rec))
	}
}

// A runner may report from inside Start: the dispatch never waits on
// itself.
func TestRunnerReportsInsideStart(t *testing.T) {
	f := tasksFile(t, "per_machine = 3", 200)
	r := newFakeRunner(func(_ context.Context, a Attempt, report func(RunEvent)) {
		report(RunEvent{Attempt: a.ID, Kind: RunFailed, Err: errors.New("no agent for linux/riscv64")})
		report(RunEvent{Attempt: a.ID, Kind: RunExited}) // a second end: ignored
	})
	r.inline = true
	var logs bytes.Buffer
	rec, err := Run(context.Background(), Config{File: f, Runner: r, Machines: []Machine{walled("a")},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Summary.Failed != 200 || rec.Summary.Attempts != 200 {
		t.Errorf("summary %+v", rec.Summary)
	}
	if !strings.Contains(logs.String(), "runner event ignored") {
		t.Errorf("a second end was not logged: %s", logs.String())
	}
}

func TestRunAlreadyCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newFakeRunner(exitAt0)
	rec, err := Run(ctx, Config{File: tasksFile(t, "", 3), Runner: r, Machines: []Machine{walled("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.starts) != 0 || rec.State != Cancelled || rec.Summary.Cancelled != 3 {
		t.Errorf("%d starts, record %s %+v", len(r.starts), rec.State, rec.Summary)
	}
}

func TestRunConfigErrors(t *testing.T) {
	if _, err := Run(context.Background(), Config{File: tasksFile(t, "", 1)}); !errors.Is(err, ErrNoRunner) {
		t.Errorf("no runner: %v", err)
	}
	r := newFakeRunner(exitAt0)
	_, err := Run(context.Background(), Config{File: tasksFile(t, `machines = ["gone"]`, 1), Runner: r, Machines: []Machine{walled("a")}})
	if err == nil || !strings.Contains(err.Error(), `machine "gone" of the pool is not in the inventory`) || len(r.starts) != 0 {
		t.Errorf("unknown machine: %v, %d starts", err, len(r.starts))
	}
}

func noLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
