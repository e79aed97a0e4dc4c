package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// Machine is a machine the dispatch may place runs on, with what was measured
// about it.
type Machine struct {
	machine.Machine
	// Record is the machine's last measurement; nil if it was never
	// measured. A walled task is placed only where it can wall the lane.
	Record *rung.Record
	// Slots is the machine's own per_machine from the inventory; 0 takes the
	// tasks file's. A machine block in the tasks file overrides both.
	Slots int
}

// Refusal is a task that no machine of its pool can take: each machine's
// reason, and what to do about it. Nothing is started for a refused task.
type Refusal struct {
	Task     string
	Machines []Unfit
}

// Unfit is why one machine cannot take a task.
type Unfit struct {
	Machine string
	// Wall is why the machine cannot wall the task's lane; nil when it can.
	Wall *carry.Refusal
	// Missing are the task's needs the machine does not meet.
	Missing []string
}

// Error starts with carry.RefusedMarker when some machine could not wall the
// task: the egress stays closed, and the message says what was measured and
// the fix for each machine.
func (r *Refusal) Error() string {
	var b strings.Builder
	wall := false
	for _, u := range r.Machines {
		wall = wall || u.Wall != nil
	}
	if wall {
		b.WriteString(carry.RefusedMarker + ": ")
	}
	fmt.Fprintf(&b, "task %q: no machine of its pool can take it", r.Task)
	for _, u := range r.Machines {
		fmt.Fprintf(&b, "; %s: ", u.Machine)
		if u.Wall != nil {
			b.WriteString(strings.TrimPrefix(u.Wall.Error(), carry.RefusedMarker+": "))
			continue
		}
		fmt.Fprintf(&b, "it lacks %s; fix: %s", strings.Join(u.Missing, ", "), needFix(u.Machine, u.Missing))
	}
	return b.String()
}

func needFix(m string, missing []string) string {
	var labels []string
	gpu := false
	for _, n := range missing {
		k, v, ok := strings.Cut(n, "=")
		if !ok {
			v = "yes"
		}
		labels = append(labels, k+"="+v)
		gpu = gpu || (k == string(rung.GPU) && !ok)
	}
	fix := fmt.Sprintf("if it has them, run 'postern machine label %s %s'", m, strings.Join(labels, " "))
	if gpu {
		fix += fmt.Sprintf(", or measure its GPUs with 'postern machine probe-confinement %s'", m)
	}
	return fix + "; or take it out of the task's machines"
}

// Meets reports whether m meets the need: "key" is met by a label key of any
// value but "no" or "false" (and "gpu", without a label, by a record that
// measured gpu yes); "key=value" by that label with that value.
func (m Machine) Meets(need string) bool {
	key, want, exact := strings.Cut(need, "=")
	v, ok := m.Labels[key]
	if exact {
		return ok && v == want
	}
	if ok {
		return !strings.EqualFold(v, "no") && !strings.EqualFold(v, "false")
	}
	return key == string(rung.GPU) && m.Record.Has(rung.GPU)
}

// Lane is where a run on m goes, by what was measured of its OS.
func (m Machine) Lane() machine.Lane {
	goos := ""
	if m.Record != nil {
		goos = m.Record.OS
	}
	return m.Machine.Lane(goos)
}

// sched is the dispatch as a state machine: events in, placements and
// changes out. It performs nothing and keeps no clock; Run drives it.
type sched struct {
	rec      *Record
	tasks    []*taskState
	machines []*machState
	queue    []int // tasks waiting for a slot, in file order
	attempts map[int]*attemptState
	nextID   int
	running  int
	max      int
	// cancelled is set once the dispatch is cancelled: nothing more starts.
	cancelled bool
	out       []Change
	ended     []int // attempts ended since the caller last looked
}

type machState struct {
	m           Machine
	idx         int
	slots       int
	running     int
	unreachable bool
}

type taskState struct {
	task     Task
	fits     []fit // the machines that can take it, in pool order
	attempts int
}

type fit struct {
	machine int
	carry   carry.Carry
}

type attemptState struct {
	id, task, machine, idx int
	started                bool
	// stopping is why the dispatch asked the run to stop: a cancel or a
	// timeout; "" while it may run.
	stopping State
	why      string
}

// newSched resolves the file's pool against the inventory and finds, for each
// task, the machines that can take it. A task no machine can take is refused
// here, before anything is started. An error is a file that does not fit the
// inventory.
func newSched(id string, f *File, inventory []Machine, max int, now time.Time) (*sched, error) {
	byName := map[string]int{}
	for i, m := range inventory {
		byName[m.Name] = i
	}
	var errs []error
	unknown := func(ref MachineRef, where string) {
		errs = append(errs, fmt.Errorf("%s: machine %q %s is not in the inventory; add it with 'postern machine add %s --ssh DEST', or take it out",
			ref.Pos, ref.Name, where, ref.Name))
	}
	s := &sched{rec: &Record{ID: id, File: f.Filename, State: Running, StartedAt: now, Max: max}, attempts: map[int]*attemptState{}, max: max}
	pool := map[string]int{}
	addPool := func(m Machine) {
		slots := f.PerMachine
		if m.Slots > 0 {
			slots = m.Slots
		}
		if n, ok := f.Slots[m.Name]; ok {
			slots = n
		}
		ms := &machState{m: m, idx: len(s.machines), slots: max1(slots)}
		pool[m.Name] = ms.idx
		s.machines = append(s.machines, ms)
		s.rec.Machines = append(s.rec.Machines, MachineRecord{Name: m.Name, Lane: m.Lane(), Slots: ms.slots, State: Reachable})
	}
	if f.Pool != nil {
		for _, ref := range f.Pool {
			i, ok := byName[ref.Name]
			if !ok {
				unknown(ref, "of the pool")
				continue
			}
			addPool(inventory[i])
		}
	} else {
		for _, m := range inventory {
			addPool(m)
		}
		for name := range f.Slots {
			if _, ok := byName[name]; !ok {
				errs = append(errs, fmt.Errorf("%s: machine %q has a machine block but is not in the inventory; add it with 'postern machine add %s --ssh DEST', or remove the block", f.Filename, name, name))
			}
		}
	}
	type chosenKey struct {
		machine               int
		open, none, container bool
	}
	chosen := map[chosenKey]struct {
		carry carry.Carry
		err   error
	}{}
	for ti, t := range f.Tasks {
		ts := &taskState{task: t}
		var unfit []Unfit
		candidates := s.machines
		if t.Machines != nil {
			candidates = nil
			for _, ref := range t.Machines {
				i, ok := pool[ref.Name]
				if !ok {
					if _, known := byName[ref.Name]; known {
						errs = append(errs, fmt.Errorf("%s: machine %q of task %q is not in the pool; add it to machines, or take it out of the task", ref.Pos, ref.Name, t.Name))
					} else {
						unknown(ref, fmt.Sprintf("of task %q", t.Name))
					}
					continue
				}
				candidates = append(candidates, s.machines[i])
			}
		}
		for _, ms := range candidates {
			u := Unfit{Machine: ms.m.Name}
			spec := carry.Spec{Machine: ms.m.Name, Lane: ms.m.Lane()}
			switch t.Network {
			case NetworkOpen:
				spec.EgressOpen = t.Reason
			case NetworkNone:
				spec.NoNetwork = true
			}
			inContainer := t.Container != ""
			if inContainer {
				spec.Lane = machine.LaneLocalContainer
			}
			// One machine's walled tasks share its answer.
			key := chosenKey{ms.idx, spec.EgressOpen != "", spec.NoNetwork, inContainer}
			ch, ok := chosen[key]
			switch {
			case ok:
			case inContainer && !ms.m.IsLocal():
				ch.err = &carry.Refusal{Lane: spec.Lane, Machine: ms.m.Name, AtRunTime: "containers run only on the local machine",
					Fix: "take the container out of the task, or give it machines = [\"local\"]"}
			case inContainer && spec.NoNetwork:
				// No network at all: the container has none, and needs no wall.
				ch.carry = carry.None
			default:
				var c carry.Carrier
				if c, ch.err = carry.Choose(ms.m.Record, spec); c != nil {
					ch.carry = c.Carry()
				}
			}
			chosen[key] = ch
			c, err := ch.carry, ch.err
			if err != nil {
				var ref *carry.Refusal
				if !errors.As(err, &ref) {
					ref = &carry.Refusal{Lane: spec.Lane, Machine: ms.m.Name, AtRunTime: err.Error(), Fix: "measure it again"}
				}
				u.Wall = ref
			}
			for _, n := range t.Needs {
				if !ms.m.Meets(n) {
					u.Missing = append(u.Missing, n)
				}
			}
			if u.Wall == nil && len(u.Missing) == 0 {
				ts.fits = append(ts.fits, fit{machine: ms.idx, carry: c})
				s.rec.Machines[ms.idx].Takes++
				continue
			}
			unfit = append(unfit, u)
		}
		s.tasks = append(s.tasks, ts)
		s.rec.Tasks = append(s.rec.Tasks, TaskRecord{Name: t.Name, Spec: t.clone(), State: Queued})
		if len(ts.fits) == 0 {
			why := "its pool is empty"
			if len(unfit) > 0 {
				why = (&Refusal{Task: t.Name, Machines: unfit}).Error()
			}
			s.rec.Tasks[ti].State = Refused
			s.rec.Tasks[ti].Why = why
			continue
		}
		s.queue = append(s.queue, ti)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.change(Change{Event: EventDispatch, Time: now, State: Running})
	for _, t := range s.rec.Tasks {
		s.change(Change{Event: EventTask, Time: now, Task: t.Name, State: t.State, Why: t.Why})
	}
	return s, nil
}

func max1(n int) int { return max(n, 1) }

func (s *sched) change(c Change) {
	c.Dispatch = s.rec.ID
	s.out = append(s.out, c)
}

func (s *sched) done() bool { return len(s.queue) == 0 && len(s.attempts) == 0 }

// place takes free slots for queued tasks, in file order: each on the least
// loaded machine that can take it, never more than a machine's slots nor the
// dispatch's max at once.
func (s *sched) place(now time.Time) []Attempt {
	if s.cancelled {
		return nil
	}
	var starts []Attempt
	for qi := 0; qi < len(s.queue); {
		if (s.max > 0 && s.running >= s.max) || !s.anyFree() {
			break
		}
		ts := s.tasks[s.queue[qi]]
		best := -1
		for k, f := range ts.fits {
			m := s.machines[f.machine]
			if m.unreachable || m.running >= m.slots {
				continue
			}
			if best < 0 || lessLoaded(m, s.machines[ts.fits[best].machine]) {
				best = k
			}
		}
		if best < 0 {
			qi++
			continue
		}
		ti := s.queue[qi]
		s.queue = slices.Delete(s.queue, qi, qi+1)
		starts = append(starts, s.start(ti, ts.fits[best], now))
	}
	return starts
}

// lessLoaded: the larger share of free slots wins, then the fewer runs; a
// tie keeps the machine earlier in the pool.
func lessLoaded(a, b *machState) bool {
	if l, r := a.running*b.slots, b.running*a.slots; l != r {
		return l < r
	}
	return a.running < b.running
}

func (s *sched) anyFree() bool {
	for _, m := range s.machines {
		if !m.unreachable && m.running < m.slots {
			return true
		}
	}
	return false
}

func (s *sched) start(ti int, f fit, now time.Time) Attempt {
	ts, m := s.tasks[ti], s.machines[f.machine]
	s.nextID++
	ts.attempts++
	tr := &s.rec.Tasks[ti]
	a := &attemptState{id: s.nextID, task: ti, machine: f.machine, idx: len(tr.Attempts)}
	s.attempts[a.id] = a
	tr.Attempts = append(tr.Attempts, AttemptRecord{ID: a.id, Machine: m.m.Name, Carry: string(f.carry), State: Starting, PlacedAt: now})
	tr.State, tr.Why = Starting, ""
	m.running++
	s.rec.Machines[m.idx].Running++
	s.running++
	s.change(Change{Event: EventTask, Time: now, Task: tr.Name, State: Starting, Machine: m.m.Name, Attempt: a.id})
	return Attempt{ID: a.id, Dispatch: s.rec.ID, Task: ts.task, Number: ts.attempts, Machine: m.m, Lane: m.m.Lane(), Carry: f.carry}
}

// handle takes one runner event. It reports whether the attempt must be
// stopped now (its timeout passed), and false for an event about an attempt
// that is not running (which is ignored).
func (s *sched) handle(ev RunEvent, now time.Time) (stop, known bool) {
	a, ok := s.attempts[ev.Attempt]
	if !ok {
		return false, false
	}
	tr := &s.rec.Tasks[a.task]
	ar := &tr.Attempts[a.idx]
	mname := s.machines[a.machine].m.Name
	switch ev.Kind {
	case RunStarted:
		if a.started {
			return false, false
		}
		a.started = true
		ar.RunID, ar.StartedAt, ar.State = ev.RunID, now, Running
		tr.State = Running
		s.change(Change{Event: EventTask, Time: now, Task: tr.Name, State: Running, Machine: mname, Attempt: a.id, Run: ev.RunID})
	case RunDenied:
		d := ev.Denial
		ar.Denials += 1 + max(d.Repeats, 0)
		tr.Denials += 1 + max(d.Repeats, 0)
		s.change(Change{Event: EventDenial, Time: now, Task: tr.Name, Machine: mname, Attempt: a.id, Run: ar.RunID, Denial: &d})
	case RunExited:
		code := ev.Code
		st := Exited
		if code != 0 {
			st = Failed
		}
		s.end(a, st, &code, "", ev.Branch, now)
	case RunFailed:
		st := Failed
		var ref *carry.Refusal
		if errors.As(ev.Err, &ref) {
			st = Refused
		}
		s.end(a, st, nil, errText(ev.Err, "failed"), ev.Branch, now)
	case RunLost:
		s.lose(a.machine, errText(ev.Err, "the machine dropped"), now)
		s.end(a, Lost, nil, errText(ev.Err, "the machine dropped"), "", now)
		s.strand(now)
	case runTimedOut:
		if a.stopping != "" {
			return false, true
		}
		a.stopping, a.why = Failed, fmt.Sprintf("timed out after %s; stopped", s.tasks[a.task].task.Timeout)
		return true, true
	default:
		return false, false
	}
	return false, true
}

func errText(err error, otherwise string) string {
	if err == nil {
		return otherwise
	}
	return err.Error()
}

// lose takes a machine out of the dispatch.
func (s *sched) lose(mi int, why string, now time.Time) {
	m := s.machines[mi]
	if m.unreachable {
		return
	}
	m.unreachable = true
	mr := &s.rec.Machines[mi]
	mr.State, mr.LostAt, mr.Why = Unreachable, now, why
	s.change(Change{Event: EventMachine, Time: now, State: Unreachable, Machine: m.m.Name, Why: why})
}

// end gives an attempt's slot back and settles its task: ended, or queued
// again after a loss while its retries last.
func (s *sched) end(a *attemptState, st State, exit *int, why, branch string, now time.Time) {
	tr := &s.rec.Tasks[a.task]
	ar := &tr.Attempts[a.idx]
	m := s.machines[a.machine]
	if a.stopping != "" {
		// Stopped by the dispatch: the stop's reason is the end, whatever
		// the run reported on its way out.
		st = a.stopping
		switch {
		case why == "":
			why = a.why
		default:
			why = a.why + " (" + why + ")"
		}
	}
	ar.State, ar.EndedAt, ar.Exit, ar.Why, ar.Branch = st, now, exit, why, branch
	m.running--
	s.rec.Machines[m.idx].Running--
	s.running--
	delete(s.attempts, a.id)
	s.ended = append(s.ended, a.id)
	began := ar.PlacedAt
	if !ar.StartedAt.IsZero() {
		began = ar.StartedAt
	}
	c := Change{Event: EventTask, Time: now, Task: tr.Name, Machine: m.m.Name, Attempt: a.id, Run: ar.RunID,
		Exit: cloneInt(exit), Branch: branch, Why: why, DurationMS: now.Sub(began).Milliseconds()}
	ts := s.tasks[a.task]
	if st == Lost && !s.cancelled && ts.attempts <= ts.task.Retries {
		c.State = Lost
		s.change(c)
		tr.State, tr.Why = Queued, fmt.Sprintf("lost on %s: %s", m.m.Name, why)
		i, _ := slices.BinarySearch(s.queue, a.task)
		s.queue = slices.Insert(s.queue, i, a.task)
		s.change(Change{Event: EventTask, Time: now, Task: tr.Name, State: Queued, Why: tr.Why, PlacedAgain: true})
		return
	}
	if st == Lost && !s.cancelled {
		why = fmt.Sprintf("%s; placed %d times, and retries = %d", why, ts.attempts, ts.task.Retries)
		c.Why = why
	}
	tr.State, tr.Exit, tr.Why, tr.Branch = st, cloneInt(exit), why, branch
	c.State = st
	s.change(c)
}

// strand ends the queued tasks that no reachable machine can take any more.
func (s *sched) strand(now time.Time) {
	kept := s.queue[:0]
	for _, ti := range s.queue {
		ts := s.tasks[ti]
		var gone []string
		reachable := false
		for _, f := range ts.fits {
			m := s.machines[f.machine]
			if !m.unreachable {
				reachable = true
				break
			}
			gone = append(gone, m.m.Name)
		}
		if reachable {
			kept = append(kept, ti)
			continue
		}
		tr := &s.rec.Tasks[ti]
		why := "every machine that can take it is unreachable: " + strings.Join(gone, ", ")
		if tr.Why != "" {
			why = tr.Why + "; " + why
		}
		tr.State, tr.Why = Lost, why
		s.change(Change{Event: EventTask, Time: now, Task: tr.Name, State: Lost, Why: why})
	}
	s.queue = kept
}

// cancel starts nothing more: queued tasks end cancelled, and the attempts
// that run are returned to be stopped.
func (s *sched) cancel(now time.Time) []int {
	if s.cancelled {
		return nil
	}
	s.cancelled = true
	for _, ti := range s.queue {
		tr := &s.rec.Tasks[ti]
		tr.State, tr.Why = Cancelled, "cancelled before it started"
		s.change(Change{Event: EventTask, Time: now, Task: tr.Name, State: Cancelled, Why: tr.Why})
	}
	s.queue = nil
	var ids []int
	for id, a := range s.attempts {
		a.stopping, a.why = Cancelled, "cancelled; stopped"
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// graceOver ends the attempts whose runner has not confirmed their stop.
func (s *sched) graceOver(grace time.Duration, now time.Time) {
	ids := make([]int, 0, len(s.attempts))
	for id := range s.attempts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		a := s.attempts[id]
		a.why = fmt.Sprintf("cancelled; its stop was not confirmed within %s", grace)
		s.end(a, Cancelled, nil, "", "", now)
	}
}

// finish closes the record with its summary.
func (s *sched) finish(now time.Time) {
	r := s.rec
	r.EndedAt = now
	r.State = Ended
	if s.cancelled {
		r.State = Cancelled
	}
	sum := &Summary{Tasks: len(r.Tasks)}
	for _, t := range r.Tasks {
		sum.Attempts += len(t.Attempts)
		switch t.State {
		case Exited:
			sum.Exited++
		case Failed:
			sum.Failed++
		case Refused:
			sum.Refused++
		case Lost:
			sum.Lost++
		case Cancelled:
			sum.Cancelled++
		}
	}
	sum.ExitCode = ExitCode(r)
	r.Summary = sum
	exit := sum.ExitCode
	s.change(Change{Event: EventDispatch, Time: now, State: r.State, Exit: &exit})
}

// ExitCode is what the dispatch's command exits with: 130 when it was
// cancelled, 0 when every task exited 0, else 1 (a task failed, was refused
// or was lost).
func ExitCode(r *Record) int {
	if r.State == Cancelled {
		return 130
	}
	for _, t := range r.Tasks {
		if t.State != Exited {
			return 1
		}
	}
	return 0
}
