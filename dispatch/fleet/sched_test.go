package fleet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe"
)

// outcome is how a simulated run goes.
type outcome struct {
	startAfter, runFor time.Duration
	kind               RunEventKind // RunExited (default) or RunFailed
	code               int
	err                error
	denials            int
}

type simEvent struct {
	at   time.Time
	seq  int
	ev   RunEvent
	drop string // a machine that drops at this time
}

// sim drives the scheduler in virtual time: each placement gets its outcome
// from behave, machines drop at the times given, and every step is checked
// against what the file and the machines allow, computed here on their own.
type sim struct {
	t        *testing.T
	s        *sched
	file     *File
	inv      map[string]Machine
	now      time.Time
	seq      int
	pq       []simEvent
	behave   func(a Attempt) outcome
	dropAt   map[string]time.Time
	dropped  map[string]bool // drops the scheduler has been told of
	live     map[int]Attempt
	starts   []Attempt
	maxLive  map[string]int
	cancelAt time.Time
}

func newSim(t *testing.T, f *File, machines []Machine, max int, behave func(Attempt) outcome) *sim {
	t.Helper()
	s, err := newSched("d1", f, machines, max, t0)
	if err != nil {
		t.Fatal(err)
	}
	inv := map[string]Machine{}
	for _, m := range machines {
		inv[m.Name] = m
	}
	if behave == nil {
		behave = func(Attempt) outcome { return outcome{startAfter: time.Millisecond, runFor: time.Second} }
	}
	return &sim{t: t, s: s, file: f, inv: inv, now: t0, behave: behave, dropAt: map[string]time.Time{},
		dropped: map[string]bool{}, live: map[int]Attempt{}, maxLive: map[string]int{}}
}

func (m *sim) push(at time.Time, ev RunEvent, drop string) {
	m.seq++
	m.pq = append(m.pq, simEvent{at: at, seq: m.seq, ev: ev, drop: drop})
}

// drop makes a machine drop at time at: its runs then are lost.
func (m *sim) drop(name string, at time.Time) {
	m.dropAt[name] = at
	m.push(at, RunEvent{}, name)
}

// slotsOf is a machine's slots, as the file and the inventory say.
func (m *sim) slotsOf(name string) int {
	if n, ok := m.file.Slots[name]; ok {
		return n
	}
	if n := m.inv[name].Slots; n > 0 {
		return n
	}
	return m.file.PerMachine
}

// mayTake says, without the scheduler, whether machine can take task.
func (m *sim) mayTake(task Task, name string) bool {
	mach, ok := m.inv[name]
	if !ok {
		return false
	}
	pool := m.file.Pool
	if task.Machines != nil {
		pool = task.Machines
	}
	if pool != nil && !slices.ContainsFunc(pool, func(r MachineRef) bool { return r.Name == name }) {
		return false
	}
	lane := mach.Lane()
	if task.Container != "" {
		if !mach.IsLocal() {
			return false
		}
		lane = machine.LaneLocalContainer
	}
	if task.Network != NetworkOpen && !(task.Container != "" && task.Network == NetworkNone) {
		for _, r := range carry.Needs(lane) {
			if !mach.Record.Has(r) {
				return false
			}
		}
	}
	for _, n := range task.Needs {
		k, v, exact := strings.Cut(n, "=")
		lv, has := mach.Labels[k]
		switch {
		case exact && (!has || lv != v):
			return false
		case !exact && has && (lv == "no" || lv == "false"):
			return false
		case !exact && !has && !(k == "gpu" && mach.Record.Has(probe.RungGPU)):
			return false
		}
	}
	return true
}

func (m *sim) placeAndCheck() {
	t := m.t
	t.Helper()
	for _, a := range m.s.place(m.now) {
		name := a.Machine.Name
		if !m.mayTake(a.Task, name) {
			t.Fatalf("%s: task %q placed on %s, which cannot take it", m.now.Sub(t0), a.Task.Name, name)
		}
		if m.dropped[name] {
			t.Fatalf("%s: task %q placed on %s after it was lost", m.now.Sub(t0), a.Task.Name, name)
		}
		want := carry.NetworkWall
		switch {
		case a.Task.Container != "" && a.Task.Network == NetworkNone:
			want = carry.None
		case a.Task.Container != "":
			want = carry.ContainerBridge
		}
		if a.Task.Network != NetworkOpen && a.Carry != want {
			t.Fatalf("task %q placed with carry %q", a.Task.Name, a.Carry)
		}
		m.live[a.ID] = a
		m.starts = append(m.starts, a)
		o := m.behave(a)
		if at, ok := m.dropAt[name]; ok && !at.After(m.now) {
			m.push(m.now.Add(o.startAfter), RunEvent{Attempt: a.ID, Kind: RunLost, Err: errors.New("ssh: connection lost")}, "")
			continue
		}
		start := m.now.Add(o.startAfter)
		if o.kind == RunFailed {
			m.push(start, RunEvent{Attempt: a.ID, Kind: RunFailed, Err: o.err}, "")
			continue
		}
		m.push(start, RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: fmt.Sprintf("run-%d", a.ID)}, "")
		for i := 0; i < o.denials; i++ {
			m.push(start, RunEvent{Attempt: a.ID, Kind: RunDenied, Denial: Denial{Kind: "transparent", Host: "evil.example", Port: 443, Reason: "not allowed"}}, "")
		}
		m.push(start.Add(o.runFor), RunEvent{Attempt: a.ID, Kind: RunExited, Code: o.code, Branch: fmt.Sprintf("postern/run-%d", a.ID)}, "")
	}
	m.checkLive()
}

func (m *sim) checkLive() {
	t := m.t
	t.Helper()
	per := map[string]int{}
	for _, a := range m.live {
		per[a.Machine.Name]++
	}
	total := 0
	for name, n := range per {
		total += n
		if n > m.slotsOf(name) {
			t.Fatalf("%s: %d runs on %s, which has %d slots", m.now.Sub(t0), n, name, m.slotsOf(name))
		}
		m.maxLive[name] = max(m.maxLive[name], n)
	}
	if m.s.max > 0 && total > m.s.max {
		t.Fatalf("%s: %d runs at once, max %d", m.now.Sub(t0), total, m.s.max)
	}
}

// run drives the dispatch to its end and checks what the record says.
func (m *sim) run() *Record {
	t := m.t
	t.Helper()
	m.placeAndCheck()
	for steps := 0; len(m.pq) > 0; steps++ {
		if steps > 1_000_000 {
			t.Fatal("the simulation does not end")
		}
		sort.Slice(m.pq, func(i, j int) bool {
			if !m.pq[i].at.Equal(m.pq[j].at) {
				return m.pq[i].at.Before(m.pq[j].at)
			}
			return m.pq[i].seq < m.pq[j].seq
		})
		if !m.cancelAt.IsZero() && !m.pq[0].at.Before(m.cancelAt) && !m.s.cancelled {
			m.now = m.cancelAt
			for _, id := range m.s.cancel(m.now) {
				// A stopped run ends as it ends: here, by signal, a
				// second later, whatever it would have done.
				m.pq = slices.DeleteFunc(m.pq, func(x simEvent) bool {
					return x.ev.Attempt == id && (x.ev.Kind == RunExited || x.ev.Kind == RunFailed || x.ev.Kind == RunLost)
				})
				m.push(m.now.Add(time.Second), RunEvent{Attempt: id, Kind: RunExited, Code: 143}, "")
			}
			continue
		}
		e := m.pq[0]
		m.pq = m.pq[1:]
		if e.at.After(m.now) {
			m.now = e.at
		}
		if e.drop != "" {
			var ids []int
			for id, a := range m.live {
				if a.Machine.Name == e.drop {
					ids = append(ids, id)
				}
			}
			slices.Sort(ids)
			for _, id := range ids {
				m.pq = slices.DeleteFunc(m.pq, func(x simEvent) bool { return x.ev.Attempt == id })
				m.push(m.now, RunEvent{Attempt: id, Kind: RunLost, Err: errors.New("ssh: connection lost")}, "")
			}
			continue
		}
		if _, ok := m.live[e.ev.Attempt]; !ok {
			t.Fatalf("event for attempt %d, which is not running", e.ev.Attempt)
		}
		_, known := m.s.handle(e.ev, m.now)
		if !known {
			t.Fatalf("the scheduler ignored %+v", e.ev)
		}
		switch e.ev.Kind {
		case RunExited, RunFailed, RunLost:
			delete(m.live, e.ev.Attempt)
			if e.ev.Kind == RunLost {
				m.dropped[m.starts[slices.IndexFunc(m.starts, func(a Attempt) bool { return a.ID == e.ev.Attempt })].Machine.Name] = true
			}
		}
		m.checkLive()
		m.placeAndCheck()
	}
	if !m.s.done() {
		t.Fatalf("the queue did not drain: queue %v, attempts %d", m.s.queue, len(m.s.attempts))
	}
	m.s.finish(m.now)
	r := m.s.rec
	m.checkRecord(r)
	return r
}

// checkRecord checks the final record against the starts that were made:
// every task ended, per-machine slots held over the attempts' own start and
// end times, and no task placed more often than its retries allow.
func (m *sim) checkRecord(r *Record) {
	t := m.t
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
		seq   int
	}
	edges := map[string][]edge{}
	for i, task := range r.Tasks {
		if !task.State.Final() {
			t.Fatalf("task %q ended %s", task.Name, task.State)
		}
		ft := m.file.Tasks[i]
		if len(task.Attempts) > 1+ft.Retries {
			t.Fatalf("task %q: %d attempts with retries = %d", task.Name, len(task.Attempts), ft.Retries)
		}
		for j, a := range task.Attempts {
			if j < len(task.Attempts)-1 && a.State != Lost {
				t.Fatalf("task %q attempt %d ended %s and was followed by another", task.Name, j+1, a.State)
			}
			if a.EndedAt.Before(a.PlacedAt) || (!a.StartedAt.IsZero() && a.StartedAt.Before(a.PlacedAt)) {
				t.Fatalf("task %q attempt %+v: times out of order", task.Name, a)
			}
			edges[a.Machine] = append(edges[a.Machine], edge{a.PlacedAt, +1, a.ID * 2}, edge{a.EndedAt, -1, a.ID*2 + 1})
		}
		if task.State == Refused && len(task.Attempts) == 0 {
			for name := range m.inv {
				if m.mayTake(ft, name) {
					t.Fatalf("task %q refused, but %s could take it", task.Name, name)
				}
			}
		}
	}
	for name, es := range edges {
		// Ends before starts at the same instant: a slot given back is
		// taken again in the same step.
		sort.Slice(es, func(i, j int) bool {
			if !es[i].at.Equal(es[j].at) {
				return es[i].at.Before(es[j].at)
			}
			if es[i].delta != es[j].delta {
				return es[i].delta < es[j].delta
			}
			return es[i].seq < es[j].seq
		})
		n := 0
		for _, e := range es {
			n += e.delta
			if n > m.slotsOf(name) {
				t.Fatalf("%s: by the record's times, %d runs at once at %s with %d slots", name, n, e.at.Sub(t0), m.slotsOf(name))
			}
		}
	}
	for _, mr := range r.Machines {
		if mr.Running != 0 {
			t.Fatalf("machine %s ends with %d slots in use", mr.Name, mr.Running)
		}
	}
}

func taskByName(r *Record, name string) *TaskRecord {
	for i := range r.Tasks {
		if r.Tasks[i].Name == name {
			return &r.Tasks[i]
		}
	}
	return nil
}

func TestPlacementNeverOnAnUnmeasuredOrUnfitMachine(t *testing.T) {
	f := mustParse(t, `per_machine = 2
task "a" { command = ["true"] }
task "b" { command = ["true"] }
task "c" { command = ["true"] }
task "d" { command = ["true"] }
task "gpu" {
  command = ["train"]
  needs   = ["gpu"]
}
`)
	machines := []Machine{unmeasured("fresh"), unable("old"), walled("box"), unmeasured("gpu0", "gpu=a100")}
	m := newSim(t, f, machines, 0, nil)
	r := m.run()
	for _, a := range m.starts {
		if a.Machine.Name != "box" {
			t.Errorf("task %q placed on %s", a.Task.Name, a.Machine.Name)
		}
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if tr := taskByName(r, name); tr.State != Exited || len(tr.Attempts) != 1 {
			t.Errorf("task %s: %+v", name, tr)
		}
	}
	g := taskByName(r, "gpu")
	if g.State != Refused || len(g.Attempts) != 0 {
		t.Fatalf("gpu task: %+v", g)
	}
	for _, want := range []string{
		carry.RefusedMarker + `: task "gpu": no machine of its pool can take it`,
		`fresh: lane remote-linux on machine "fresh": never measured; the lane needs netns, netns-redirect, landlock, overlay; nothing was started; fix: run 'postern machine probe-confinement fresh' to measure it`,
		`old: lane remote-linux on machine "old": measured 2026-03-14T08:26:53Z; netns: no (unshare: operation not permitted) remedy: sysctl -w kernel.unprivileged_userns_clone=1`,
		`box: it lacks gpu; fix: if it has them, run 'postern machine label box gpu=yes', or measure its GPUs with 'postern machine probe-confinement box'; or take it out of the task's machines`,
		`gpu0: lane remote-linux on machine "gpu0": never measured`,
	} {
		if !strings.Contains(g.Why, want) {
			t.Errorf("refusal lacks %q:\n%s", want, g.Why)
		}
	}
	if !strings.HasPrefix(g.Why, carry.RefusedMarker) {
		t.Errorf("refusal does not start with the marker: %s", g.Why)
	}
	if ExitCode(r) != 1 {
		t.Errorf("exit %d with a refused task", ExitCode(r))
	}
}

func TestNeeds(t *testing.T) {
	f := mustParse(t, `per_machine = 4
task "gpu" {
  command = ["train"]
  needs   = ["gpu"]
}
task "a100" {
  command = ["train"]
  needs   = ["gpu=a100"]
}
task "research" {
  command = ["x"]
  needs   = ["team=research", "gpu"]
}
`)
	machines := []Machine{
		walled("plain"),
		withGPU(walled("measured")),
		walled("labelled", "gpu=a100"),
		withGPU(walled("says-no", "gpu=no")),
		walled("team", "team=research", "gpu=yes"),
	}
	m := newSim(t, f, machines, 0, nil)
	ok := map[string][]string{}
	for _, task := range f.Tasks {
		for _, mach := range machines {
			if m.mayTake(task, mach.Name) {
				ok[task.Name] = append(ok[task.Name], mach.Name)
			}
		}
	}
	want := map[string][]string{"gpu": {"measured", "labelled", "team"}, "a100": {"labelled"}, "research": {"team"}}
	for name, w := range want {
		if !slices.Equal(ok[name], w) {
			t.Errorf("task %s may go to %v, want %v", name, ok[name], w)
		}
		got := m.s.tasks[slices.IndexFunc(f.Tasks, func(x Task) bool { return x.Name == name })].fits
		var names []string
		for _, g := range got {
			names = append(names, m.s.machines[g.machine].m.Name)
		}
		if !slices.Equal(names, w) {
			t.Errorf("scheduler fits task %s to %v, want %v", name, names, w)
		}
	}
	m.run()

	// A task no machine has the labels for is refused, without the egress
	// marker: every machine could wall it.
	f2 := mustParse(t, "task \"t\" {\n  command = [\"x\"]\n  needs = [\"tpu\"]\n}")
	r := newSim(t, f2, []Machine{walled("a")}, 0, nil).run()
	if tr := r.Tasks[0]; tr.State != Refused || strings.Contains(tr.Why, carry.RefusedMarker) ||
		tr.Why != `task "t": no machine of its pool can take it; a: it lacks tpu; fix: if it has them, run 'postern machine label a tpu=yes'; or take it out of the task's machines` {
		t.Errorf("needs refusal: %+v", tr)
	}
}

func TestOpenNetworkNeedsNoMeasurement(t *testing.T) {
	f := mustParse(t, "task \"t\" {\n  command = [\"x\"]\n  network = \"open\"\n  reason = \"vendor installer\"\n}")
	m := newSim(t, f, []Machine{unmeasured("fresh")}, 0, nil)
	r := m.run()
	if r.Tasks[0].State != Exited || m.starts[0].Carry != carry.None || m.starts[0].Task.Reason != "vendor installer" {
		t.Errorf("open task: %+v, attempt %+v", r.Tasks[0], m.starts[0])
	}
}

func TestLeastLoadedFittingMachineWins(t *testing.T) {
	var src strings.Builder
	src.WriteString("machine \"c\" { per_machine = 4 }\nper_machine = 2\n")
	for i := range 8 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	m := newSim(t, f, []Machine{walled("a"), walled("b"), walled("c")}, 0, nil)
	m.placeAndCheck()
	var got []string
	for _, a := range m.starts {
		got = append(got, a.Machine.Name)
	}
	// By share of slots in use, then fewer runs, then pool order.
	if want := []string{"a", "b", "c", "c", "a", "b", "c", "c"}; !slices.Equal(got, want) {
		t.Fatalf("placed on %v, want %v", got, want)
	}
	m.run()
}

func TestQueueDrainsInFileOrder(t *testing.T) {
	var src strings.Builder
	for i := range 6 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	m := newSim(t, f, []Machine{walled("a")}, 0, func(a Attempt) outcome {
		// Later tasks are shorter: order must still be the file's.
		return outcome{startAfter: time.Millisecond, runFor: time.Duration(10-a.ID) * time.Second}
	})
	r := m.run()
	for i, a := range m.starts {
		if a.Task.Name != fmt.Sprintf("t%d", i) {
			t.Fatalf("start %d is %s", i, a.Task.Name)
		}
	}
	for i := 1; i < len(r.Tasks); i++ {
		if r.Tasks[i].Attempts[0].PlacedAt.Before(r.Tasks[i-1].Attempts[0].EndedAt) {
			t.Fatalf("task %d placed before task %d ended on a machine of one slot", i, i-1)
		}
	}
}

// A task whose machines are busy does not hold back later tasks that can go
// elsewhere, and it still gets the next slot of its own machine first.
func TestBlockedTaskDoesNotHoldTheQueue(t *testing.T) {
	f := mustParse(t, `
task "docs1" {
  command  = ["x"]
  machines = ["box"]
}
task "docs2" {
  command  = ["x"]
  machines = ["box"]
}
task "any1" { command = ["x"] }
task "any2" { command = ["x"] }
`)
	m := newSim(t, f, []Machine{walled("box"), walled("gpu1")}, 0, func(a Attempt) outcome {
		return outcome{startAfter: time.Millisecond, runFor: 10 * time.Second}
	})
	m.placeAndCheck()
	var got []string
	for _, a := range m.starts {
		got = append(got, a.Task.Name+"@"+a.Machine.Name)
	}
	if want := []string{"docs1@box", "any1@gpu1"}; !slices.Equal(got, want) {
		t.Fatalf("first placements %v, want %v", got, want)
	}
	m.run()
	var order []string
	for _, a := range m.starts {
		order = append(order, a.Task.Name+"@"+a.Machine.Name)
	}
	// box frees at the same instant as gpu1: docs2 (earlier) takes box.
	if want := []string{"docs1@box", "any1@gpu1", "docs2@box", "any2@gpu1"}; !slices.Equal(order, want) {
		t.Fatalf("placements %v, want %v", order, want)
	}
}

func TestMaxBoundsTheDispatch(t *testing.T) {
	var src strings.Builder
	src.WriteString("per_machine = 4\nmax = 5\n")
	for i := range 30 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	machines := []Machine{walled("a"), walled("b"), walled("c")}
	m := newSim(t, f, machines, f.Max, nil)
	m.run()
	total := 0
	for _, n := range m.maxLive {
		total += n
	}
	if m.s.max != 5 || total < 5 {
		t.Errorf("max %d, peak per machine %v", m.s.max, m.maxLive)
	}
	// --max replaces the file's.
	m = newSim(t, f, machines, 2, nil)
	m.run()
	for name, n := range m.maxLive {
		if n > 2 {
			t.Errorf("%s had %d at once with --max 2", name, n)
		}
	}
}

func TestPerMachineFromFileInventoryAndBlock(t *testing.T) {
	var src strings.Builder
	src.WriteString("per_machine = 2\nmachine \"blocked\" { per_machine = 1 }\n")
	for i := range 40 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	own := walled("own")
	own.Slots = 5
	both := walled("blocked")
	both.Slots = 7 // the tasks file's block wins
	m := newSim(t, f, []Machine{walled("plain"), own, both}, 0, nil)
	m.run()
	want := map[string]int{"plain": 2, "own": 5, "blocked": 1}
	for name, n := range want {
		if m.maxLive[name] != n {
			t.Errorf("%s peaked at %d runs, want its %d slots filled", name, m.maxLive[name], n)
		}
		if got := m.s.rec.Machines[slices.IndexFunc(m.s.rec.Machines, func(r MachineRecord) bool { return r.Name == name })].Slots; got != n {
			t.Errorf("record says %s has %d slots, want %d", name, got, n)
		}
	}
}

func TestLostMachineTasksPlacedAgain(t *testing.T) {
	var src strings.Builder
	src.WriteString("per_machine = 2\nretries = 1\n")
	for i := range 10 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	m := newSim(t, f, []Machine{walled("gpu1"), walled("gpu2"), walled("box")}, 0, func(Attempt) outcome {
		return outcome{startAfter: time.Second, runFor: 10 * time.Second}
	})
	m.drop("gpu2", t0.Add(5*time.Second))
	r := m.run()
	lostTasks := 0
	for _, task := range r.Tasks {
		if task.State != Exited {
			t.Errorf("task %s ended %s: %s", task.Name, task.State, task.Why)
		}
		if len(task.Attempts) == 2 {
			lostTasks++
			first, second := task.Attempts[0], task.Attempts[1]
			if first.Machine != "gpu2" || first.State != Lost || first.Why != "ssh: connection lost" || second.Machine == "gpu2" || second.State != Exited {
				t.Errorf("task %s attempts %+v", task.Name, task.Attempts)
			}
		}
	}
	if lostTasks != 2 {
		t.Errorf("%d tasks were placed again, want the 2 that ran on gpu2", lostTasks)
	}
	for _, a := range m.starts {
		if a.Machine.Name == "gpu2" && a.ID > 6 {
			t.Errorf("attempt %d placed on gpu2 after it dropped", a.ID)
		}
	}
	g := r.Machines[1]
	if g.State != Unreachable || !g.LostAt.Equal(t0.Add(5*time.Second)) || g.Why != "ssh: connection lost" {
		t.Errorf("gpu2 = %+v", g)
	}
	if ExitCode(r) != 0 {
		t.Errorf("exit %d: every task exited 0 in the end", ExitCode(r))
	}
	// The loss shows in the changes: machine unreachable, lost, queued again.
	var seen []string
	for _, c := range m.s.out {
		if c.Event == EventMachine || c.PlacedAgain || c.State == Lost {
			seen = append(seen, c.Event+" "+string(c.State)+" "+c.Task+" "+c.Machine)
		}
	}
	want := []string{"machine unreachable  gpu2", "task lost t1 gpu2", "task queued t1 ", "task lost t4 gpu2", "task queued t4 "}
	if !slices.Equal(seen, want) {
		t.Errorf("changes %q, want %q", seen, want)
	}
}

func TestRetriesExhausted(t *testing.T) {
	f := mustParse(t, `retries = 1
task "a" { command = ["x"] }
task "b" {
  command = ["x"]
  retries = 0
}`)
	m := newSim(t, f, []Machine{walled("m1"), walled("m2"), walled("m3")}, 0, func(Attempt) outcome {
		return outcome{startAfter: time.Second, runFor: time.Minute}
	})
	// a goes to m1 and b to m2; m1 drops (a placed again on m3), then m2
	// (b lost for good), then m3 (a lost for good).
	m.drop("m1", t0.Add(10*time.Second))
	m.drop("m2", t0.Add(20*time.Second))
	m.drop("m3", t0.Add(30*time.Second))
	r := m.run()
	a, b := r.Tasks[0], r.Tasks[1]
	if a.State != Lost || len(a.Attempts) != 2 || a.Attempts[0].Machine != "m1" || a.Attempts[1].Machine != "m3" ||
		a.Why != "ssh: connection lost; placed 2 times, and retries = 1" {
		t.Errorf("a = %+v", a)
	}
	if b.State != Lost || len(b.Attempts) != 1 || b.Why != "ssh: connection lost; placed 1 times, and retries = 0" {
		t.Errorf("b = %+v", b)
	}
	if ExitCode(r) != 1 {
		t.Errorf("exit %d with lost tasks", ExitCode(r))
	}
}

func TestQueuedTaskStrandedByLoss(t *testing.T) {
	f := mustParse(t, `
task "first" {
  command  = ["x"]
  machines = ["m1"]
}
task "second" {
  command  = ["x"]
  machines = ["m1"]
  retries  = 0
}
task "elsewhere" { command = ["x"] }
`)
	m := newSim(t, f, []Machine{walled("m1"), walled("m2")}, 0, func(Attempt) outcome {
		return outcome{startAfter: time.Second, runFor: time.Minute}
	})
	m.drop("m1", t0.Add(10*time.Second))
	r := m.run()
	first, second, elsewhere := r.Tasks[0], r.Tasks[1], r.Tasks[2]
	if first.State != Lost || !strings.HasPrefix(first.Why, "lost on m1: ssh: connection lost; every machine that can take it is unreachable: m1") {
		t.Errorf("first = %+v", first)
	}
	if second.State != Lost || len(second.Attempts) != 0 || second.Why != "every machine that can take it is unreachable: m1" {
		t.Errorf("second = %+v", second)
	}
	if elsewhere.State != Exited || elsewhere.Attempts[0].Machine != "m2" {
		t.Errorf("elsewhere = %+v", elsewhere)
	}
}

func TestCancelStopsRunningAndStartsNothing(t *testing.T) {
	var src strings.Builder
	src.WriteString("per_machine = 2\n")
	for i := range 10 {
		fmt.Fprintf(&src, "task \"t%d\" { command = [\"x\"] }\n", i)
	}
	f := mustParse(t, src.String())
	m := newSim(t, f, []Machine{walled("a"), walled("b")}, 0, func(Attempt) outcome {
		return outcome{startAfter: time.Second, runFor: time.Minute}
	})
	m.cancelAt = t0.Add(90 * time.Second)
	r := m.run()
	if r.State != Cancelled || ExitCode(r) != 130 || r.Summary.ExitCode != 130 {
		t.Errorf("dispatch %s exit %d", r.State, ExitCode(r))
	}
	var exited, cancelled, never int
	for _, task := range r.Tasks {
		switch {
		case task.State == Exited:
			exited++
		case task.State == Cancelled && len(task.Attempts) == 1:
			cancelled++
			if task.Why != "cancelled; stopped" || task.Attempts[0].Exit == nil || *task.Attempts[0].Exit != 143 {
				t.Errorf("task %s: %+v", task.Name, task)
			}
		case task.State == Cancelled && len(task.Attempts) == 0:
			never++
			if task.Why != "cancelled before it started" {
				t.Errorf("task %s: %+v", task.Name, task)
			}
		default:
			t.Errorf("task %s: %+v", task.Name, task)
		}
	}
	// At 90 s the first four have exited (61 s each), the next four run.
	if exited != 4 || cancelled != 4 || never != 2 {
		t.Errorf("exited %d, cancelled while running %d, never started %d", exited, cancelled, never)
	}
	if len(m.starts) != 8 {
		t.Errorf("%d starts; nothing may start after the cancel", len(m.starts))
	}
}

func TestRunFailures(t *testing.T) {
	f := mustParse(t, `
task "exit3" { command = ["x"] }
task "nostart" { command = ["x"] }
task "wallrefused" { command = ["x"] }
task "ok" { command = ["x"] }
`)
	m := newSim(t, f, []Machine{walled("a")}, 0, func(a Attempt) outcome {
		o := outcome{startAfter: time.Millisecond, runFor: time.Second}
		switch a.Task.Name {
		case "exit3":
			o.code, o.denials = 3, 2
		case "nostart":
			o.kind, o.err = RunFailed, errors.New("policy p.hcl: t.hcl:1:1: unknown attribute")
		case "wallrefused":
			o.kind, o.err = RunFailed, fmt.Errorf("raise the wall: %w", &carry.Refusal{Lane: "remote-linux", Machine: "a", AtRunTime: "nftables refused", Fix: "measure again"})
		}
		return o
	})
	r := m.run()
	e3 := r.Tasks[0]
	if e3.State != Failed || e3.Exit == nil || *e3.Exit != 3 || e3.Denials != 2 || e3.Branch != "postern/run-1" {
		t.Errorf("exit3 = %+v", e3)
	}
	if ns := r.Tasks[1]; ns.State != Failed || ns.Exit != nil || !strings.Contains(ns.Why, "unknown attribute") {
		t.Errorf("nostart = %+v", ns)
	}
	if wr := r.Tasks[2]; wr.State != Refused || !strings.Contains(wr.Why, carry.RefusedMarker) {
		t.Errorf("wallrefused = %+v", wr)
	}
	if ok := r.Tasks[3]; ok.State != Exited || *ok.Exit != 0 {
		t.Errorf("ok = %+v", ok)
	}
	s := r.Summary
	if s.Exited != 1 || s.Failed != 2 || s.Refused != 1 || s.Attempts != 4 || s.ExitCode != 1 {
		t.Errorf("summary %+v", s)
	}
}

func TestTimeoutStopsTheRun(t *testing.T) {
	f := mustParse(t, "task \"slow\" {\n  command = [\"x\"]\n  timeout = \"30s\"\n}")
	s, err := newSched("d", f, []Machine{walled("a")}, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	a := s.place(t0)[0]
	s.handle(RunEvent{Attempt: a.ID, Kind: RunStarted, RunID: "r"}, t0)
	if stop, _ := s.handle(RunEvent{Attempt: a.ID, Kind: runTimedOut}, t0.Add(30*time.Second)); !stop {
		t.Fatal("timeout did not ask to stop the run")
	}
	s.handle(RunEvent{Attempt: a.ID, Kind: RunExited, Code: 143}, t0.Add(31*time.Second))
	tr := s.rec.Tasks[0]
	if tr.State != Failed || tr.Why != "timed out after 30s; stopped" || *tr.Exit != 143 {
		t.Errorf("slow = %+v", tr)
	}
}

func TestUnknownMachines(t *testing.T) {
	f := mustParse(t, "machines = [\"a\", \"ghost\"]\ntask \"x\" {\n  command = [\"x\"]\n  machines = [\"a\"]\n}")
	_, err := newSched("d", f, []Machine{walled("a")}, 0, t0)
	if err == nil || err.Error() != `tasks.hcl:1:18: machine "ghost" of the pool is not in the inventory; add it with 'postern machine add ghost --ssh DEST', or take it out` {
		t.Errorf("err = %v", err)
	}
	f = mustParse(t, "task \"x\" {\n  command = [\"x\"]\n  machines = [\"ghost\"]\n}")
	_, err = newSched("d", f, []Machine{walled("a")}, 0, t0)
	if err == nil || err.Error() != `tasks.hcl:3:15: machine "ghost" of task "x" is not in the inventory; add it with 'postern machine add ghost --ssh DEST', or take it out` {
		t.Errorf("err = %v", err)
	}
}

// TestRandomDispatches runs many dispatches of random shape (machines
// measured, unmeasured and unable, with and without labels; tasks with
// pools, needs and retries of their own; runs that fail; machines that drop)
// and checks every step against what the file and the machines allow.
func TestRandomDispatches(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	seen := map[string]int{}
	defer func() {
		// The shapes must have met every path: otherwise they test little.
		t.Logf("over %d dispatches: %v", seeds, seen)
		for _, k := range []string{"refused", "refused-needs", "placed-again", "lost", "failed", "cancelled", "exited", "max"} {
			if seen[k] == 0 && !t.Failed() {
				t.Errorf("no dispatch met %s", k)
			}
		}
	}()
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		var machines []Machine
		nm := 1 + rng.IntN(6)
		for i := range nm {
			name := fmt.Sprintf("m%d", i)
			var labels []string
			if rng.IntN(3) == 0 {
				labels = append(labels, "gpu=a100")
			}
			if rng.IntN(3) == 0 {
				labels = append(labels, "team=research")
			}
			var m Machine
			switch rng.IntN(5) {
			case 0:
				m = unmeasured(name, labels...)
			case 1:
				m = unable(name, labels...)
			default:
				m = walled(name, labels...)
				if rng.IntN(3) == 0 {
					m = withGPU(m)
				}
			}
			if rng.IntN(4) == 0 {
				m.Slots = 1 + rng.IntN(4)
			}
			machines = append(machines, m)
		}
		var src strings.Builder
		fmt.Fprintf(&src, "per_machine = %d\nretries = %d\n", 1+rng.IntN(4), rng.IntN(3))
		for i := range machines {
			if rng.IntN(5) == 0 {
				fmt.Fprintf(&src, "machine \"m%d\" { per_machine = %d }\n", i, 1+rng.IntN(3))
			}
		}
		nt := 1 + rng.IntN(40)
		for i := range nt {
			fmt.Fprintf(&src, "task \"t%d\" {\n  command = [\"x\"]\n", i)
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&src, "  machines = [\"m%d\"]\n", rng.IntN(nm))
			}
			switch rng.IntN(6) {
			case 0:
				src.WriteString("  needs = [\"gpu\"]\n")
			case 1:
				src.WriteString("  needs = [\"team=research\"]\n")
			}
			if rng.IntN(10) == 0 {
				src.WriteString("  network = \"open\"\n  reason = \"r\"\n")
			}
			if rng.IntN(5) == 0 {
				fmt.Fprintf(&src, "  retries = %d\n", rng.IntN(3))
			}
			src.WriteString("}\n")
		}
		f, err := Parse("tasks.hcl", []byte(src.String()))
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, src.String())
		}
		maxRuns := 0
		if rng.IntN(3) == 0 {
			maxRuns = 1 + rng.IntN(6)
		}
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newSim(t, f, machines, maxRuns, func(a Attempt) outcome {
				o := outcome{startAfter: time.Duration(1+rng.IntN(1000)) * time.Millisecond, runFor: time.Duration(1+rng.IntN(60000)) * time.Millisecond}
				switch rng.IntN(10) {
				case 0:
					o.code = 1 + rng.IntN(3)
				case 1:
					o.kind, o.err = RunFailed, errors.New("no agent for this platform")
				}
				o.denials = rng.IntN(2)
				return o
			})
			for i := range machines {
				if rng.IntN(4) == 0 {
					m.drop(machines[i].Name, t0.Add(time.Duration(rng.IntN(120000))*time.Millisecond))
				}
			}
			if rng.IntN(8) == 0 {
				m.cancelAt = t0.Add(time.Duration(rng.IntN(120000)) * time.Millisecond)
			}
			r := m.run()
			if maxRuns > 0 {
				seen["max"]++
			}
			for _, task := range r.Tasks {
				seen[string(task.State)]++
				if task.State == Refused && !strings.HasPrefix(task.Why, carry.RefusedMarker) {
					seen["refused-needs"]++
				}
				if len(task.Attempts) > 1 {
					seen["placed-again"]++
				}
			}
			if m.cancelAt.IsZero() || !m.s.cancelled {
				for _, task := range r.Tasks {
					if task.State == Cancelled {
						t.Fatalf("task %s cancelled without a cancel", task.Name)
					}
				}
			}
		})
		if !ok {
			t.Logf("seed %d file:\n%s", seed, src.String())
			return
		}
	}
}

func TestHundredShortTasksOverThreeMachines(t *testing.T) {
	var src strings.Builder
	src.WriteString("per_machine = 4\n")
	for i := range 100 {
		fmt.Fprintf(&src, "task \"t%03d\" { command = [\"true\"] }\n", i)
	}
	f := mustParse(t, src.String())
	rng := rand.New(rand.NewPCG(1, 2))
	m := newSim(t, f, []Machine{walled("a"), walled("b"), walled("c")}, 0, func(Attempt) outcome {
		return outcome{startAfter: time.Millisecond, runFor: time.Duration(20+rng.IntN(80)) * time.Millisecond}
	})
	r := m.run()
	per := map[string]int{}
	for _, task := range r.Tasks {
		if task.State != Exited || len(task.Attempts) != 1 {
			t.Fatalf("task %s: %+v", task.Name, task)
		}
		per[task.Attempts[0].Machine]++
	}
	for _, name := range []string{"a", "b", "c"} {
		if m.maxLive[name] != 4 || per[name] < 25 {
			t.Errorf("%s: peak %d runs, %d tasks", name, m.maxLive[name], per[name])
		}
	}
	if r.Summary.Exited != 100 || r.Summary.ExitCode != 0 {
		t.Errorf("summary %+v", r.Summary)
	}
}

// A container task goes only to the local machine, and only where its record
// measured the container lane's rungs; with network = "none" it needs no
// wall; a pool without local refuses it with the marker.
func TestContainerTaskOnlyLocal(t *testing.T) {
	local := Machine{Machine: machine.LocalMachine(), Record: linuxRecord("local", probe.RungContainer)}
	f := mustParse(t, "task \"c\" {\n  command = [\"x\"]\n  container = \"busybox\"\n}\n"+
		"task \"n\" {\n  command = [\"x\"]\n  container = \"busybox\"\n  network = \"none\"\n}\n"+
		"task \"r\" {\n  command = [\"x\"]\n  container = \"busybox\"\n  machines = [\"far\"]\n}\n")
	m := newSim(t, f, []Machine{walled("far"), local}, 0, nil)
	r := m.run()
	for _, a := range m.starts {
		if a.Machine.Name != "local" {
			t.Fatalf("container task %s placed on %s", a.Task.Name, a.Machine.Name)
		}
	}
	byName := map[string]TaskRecord{}
	for _, tr := range r.Tasks {
		byName[tr.Name] = tr
	}
	if c := byName["c"]; c.State != Exited || c.Attempts[0].Carry != string(carry.ContainerBridge) {
		t.Errorf("walled container task: %+v", c)
	}
	if n := byName["n"]; n.State != Exited || n.Attempts[0].Carry != string(carry.None) {
		t.Errorf("container task with no network: %+v", n)
	}
	if rr := byName["r"]; rr.State != Refused || !strings.HasPrefix(rr.Why, carry.RefusedMarker) || !strings.Contains(rr.Why, "only on the local machine") {
		t.Errorf("container task on a remote pool: %+v", rr)
	}

	// The local machine measured without the container rung takes none.
	bare := Machine{Machine: machine.LocalMachine(), Record: linuxRecord("local")}
	f = mustParse(t, "task \"c\" {\n  command = [\"x\"]\n  container = \"busybox\"\n}\n")
	r = newSim(t, f, []Machine{bare}, 0, nil).run()
	if r.Tasks[0].State != Refused || !strings.Contains(r.Tasks[0].Why, "local-container") {
		t.Errorf("container task on a machine that did not measure containers: %+v", r.Tasks[0])
	}
}
