package fleet

import (
	"maps"
	"slices"
	"time"

	"github.com/postern-dev/postern/machine"
)

// State is where a task, an attempt or the dispatch stands.
type State string

// A task's and an attempt's states. A task ends exited (code 0), failed,
// refused, lost or cancelled; while it waits for a slot it is queued, once
// placed starting, and running once its run has begun on the machine.
const (
	Queued    State = "queued"
	Starting  State = "starting"
	Running   State = "running"
	Exited    State = "exited"
	Failed    State = "failed"
	Refused   State = "refused"
	Lost      State = "lost"
	Cancelled State = "cancelled"
)

// A machine's and the dispatch's own states.
const (
	// Reachable is a machine that may take runs.
	Reachable State = "reachable"
	// Unreachable is a machine that dropped; it takes nothing more for the
	// rest of the dispatch.
	Unreachable State = "unreachable"
	// Ended is a dispatch whose every task reached its end.
	Ended State = "ended"
)

// Final reports whether s is a state a task or an attempt ends in.
func (s State) Final() bool {
	switch s {
	case Exited, Failed, Refused, Lost, Cancelled:
		return true
	}
	return false
}

// Record is a dispatch: its machines, its tasks and every attempt of them.
// It is what a renderer draws and what the records keep; it is plain data,
// serialisable as JSON.
type Record struct {
	ID        string    `json:"id"`
	File      string    `json:"file"`
	State     State     `json:"state"` // running, ended or cancelled
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Max is the bound on runs at once in the whole dispatch; 0 is none but
	// the machines' slots.
	Max      int             `json:"max,omitempty"`
	Machines []MachineRecord `json:"machines"`
	Tasks    []TaskRecord    `json:"tasks"`
	Summary  *Summary        `json:"summary,omitempty"`
}

// MachineRecord is one machine of the pool as the dispatch saw it.
type MachineRecord struct {
	Name  string       `json:"name"`
	Lane  machine.Lane `json:"lane"`
	Slots int          `json:"slots"`
	// Takes is how many of the dispatch's tasks it can take (walls their
	// lane, meets their needs); a machine that takes none adds no slots.
	Takes int `json:"takes"`
	// Running is how many of its slots are in use now.
	Running int   `json:"running"`
	State   State `json:"state"` // reachable or unreachable
	// LostAt and Why say when and how it dropped.
	LostAt time.Time `json:"lost_at,omitzero"`
	Why    string    `json:"why,omitempty"`
}

// TaskRecord is one task of the file and what became of it.
type TaskRecord struct {
	Name string `json:"name"`
	// Spec is the task as the tasks file gave it, its defaults applied.
	Spec  Task  `json:"spec"`
	State State `json:"state"`
	// Exit is the final attempt's exit code, when its run exited.
	Exit *int `json:"exit,omitempty"`
	// Why says why the task ended as it did when that was not its command's
	// own exit: a refusal, a failure to start, a loss, a cancel, a timeout.
	Why string `json:"why,omitempty"`
	// Branch is the result branch of the final attempt, if it brought one.
	Branch string `json:"branch,omitempty"`
	// Denials counts the door's denials over all its attempts.
	Denials  int             `json:"denials"`
	Attempts []AttemptRecord `json:"attempts,omitempty"`
}

// AttemptRecord is one placement of a task on a machine: one run.
type AttemptRecord struct {
	// ID is the attempt's number in the whole dispatch, as the runner's
	// events name it.
	ID      int    `json:"id"`
	RunID   string `json:"run_id,omitempty"`
	Machine string `json:"machine"`
	Carry   string `json:"carry"`
	State   State  `json:"state"`
	// PlacedAt is when its slot was taken, StartedAt when the run began on
	// the machine (zero if it never did), EndedAt when the slot was given
	// back.
	PlacedAt  time.Time `json:"placed_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Exit      *int      `json:"exit,omitempty"`
	Why       string    `json:"why,omitempty"`
	Branch    string    `json:"branch,omitempty"`
	Denials   int       `json:"denials"`
}

// Summary counts how the tasks ended.
type Summary struct {
	Tasks     int `json:"tasks"`
	Exited    int `json:"exited"`
	Failed    int `json:"failed"`
	Refused   int `json:"refused"`
	Lost      int `json:"lost"`
	Cancelled int `json:"cancelled"`
	Attempts  int `json:"attempts"`
	// ExitCode is what the dispatch's command exits with: 0 when every task
	// exited 0, 130 when the dispatch was cancelled, else 1.
	ExitCode int `json:"exit_code"`
}

// Clone is a deep copy of r, safe to keep while the dispatch goes on.
func (r *Record) Clone() *Record {
	if r == nil {
		return nil
	}
	c := *r
	c.Machines = slices.Clone(r.Machines)
	c.Tasks = make([]TaskRecord, len(r.Tasks))
	for i, t := range r.Tasks {
		t.Exit = cloneInt(t.Exit)
		t.Spec = t.Spec.clone()
		t.Attempts = slices.Clone(t.Attempts)
		for j := range t.Attempts {
			t.Attempts[j].Exit = cloneInt(t.Attempts[j].Exit)
		}
		c.Tasks[i] = t
	}
	if r.Summary != nil {
		s := *r.Summary
		c.Summary = &s
	}
	return &c
}

func (t Task) clone() Task {
	t.Command = slices.Clone(t.Command)
	t.Machines = slices.Clone(t.Machines)
	t.Needs = slices.Clone(t.Needs)
	t.Env = maps.Clone(t.Env)
	return t
}

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Slots returns the slots in use and the slots of the machines that can
// still take runs of this dispatch.
func (r *Record) Slots() (used, total int) {
	for _, m := range r.Machines {
		used += m.Running
		if m.State != Unreachable && m.Takes > 0 {
			total += m.Slots
		}
	}
	if r.Max > 0 && r.Max < total {
		total = r.Max
	}
	return used, total
}

// Denial is one connection the door refused (or, in observe mode, would
// have refused) for a task's run.
type Denial struct {
	Kind      string `json:"kind"` // connect, http, transparent, dns, wall
	Host      string `json:"host"`
	Port      uint16 `json:"port,omitempty"`
	Reason    string `json:"reason"`
	WouldDeny bool   `json:"would_deny,omitempty"`
	Repeats   int    `json:"repeats,omitempty"`
}

// Change is one thing that happened in a dispatch. It is the one shape of
// every object --json prints, one per line:
//
//	event     "dispatch", "task", "machine" or "denial"
//	time      when it happened (RFC 3339)
//	dispatch  the dispatch's id
//	state     dispatch: running, ended, cancelled;
//	          task: queued, starting, running, exited, failed, refused, lost, cancelled;
//	          machine: unreachable; denial: absent
//	task      the task's name (task, denial)
//	machine   the machine (task once placed, machine)
//	attempt   the attempt's number in the dispatch (task once placed, denial)
//	run       the run's id, once the run has one
//	exit      the exit code (task exited or failed by its code; dispatch ended)
//	branch    the result branch (task exited or failed)
//	why       why, when not the command's own exit: a refusal, a loss, a cancel
//	placed_again  true on the queued change of a task placed again after a loss
//	duration_ms   how long the attempt ran (task final states)
//	denial    kind, host, port, reason, would_deny, repeats (denial)
type Change struct {
	Event       string    `json:"event"`
	Time        time.Time `json:"time"`
	Dispatch    string    `json:"dispatch"`
	State       State     `json:"state,omitempty"`
	Task        string    `json:"task,omitempty"`
	Machine     string    `json:"machine,omitempty"`
	Attempt     int       `json:"attempt,omitempty"`
	Run         string    `json:"run,omitempty"`
	Exit        *int      `json:"exit,omitempty"`
	Branch      string    `json:"branch,omitempty"`
	Why         string    `json:"why,omitempty"`
	PlacedAgain bool      `json:"placed_again,omitempty"`
	DurationMS  int64     `json:"duration_ms,omitempty"`
	Denial      *Denial   `json:"denial,omitempty"`
}

// Events of a Change.
const (
	EventDispatch = "dispatch"
	EventTask     = "task"
	EventMachine  = "machine"
	EventDenial   = "denial"
)
