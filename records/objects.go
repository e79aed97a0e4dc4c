package records

import (
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// State is where a run stands.
type State string

// Run states.
const (
	StateRefused State = "refused"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateFailed  State = "failed"
	StateLost    State = "lost"
	// StateCancelled is a run its dispatch stopped when it was cancelled
	// (Ctrl-C, dispatches cancel).
	StateCancelled State = "cancelled"
)

// How a run ended (Run.End): which of postern's exit statuses it gets.
const (
	EndExited        = "exited"         // the command exited by itself
	EndSignalled     = "signalled"      // a signal ended the command
	EndRefused       = "refused"        // no carry could wall it: nothing was spawned
	EndStartFailed   = "start-failed"   // postern could not start it, or carry it to its end
	EndNotExecutable = "not-executable" // the command was found but cannot be executed
	EndNotFound      = "not-found"      // the command was not found
	EndLost          = "lost"           // the controller lost the run's machine mid-run
)

// Run is one command line dispatched to one machine under one policy.
type Run struct {
	ID               string       `json:"id"`
	Machine          string       `json:"machine"`
	Lane             machine.Lane `json:"lane"`
	Carry            carry.Carry  `json:"carry"`
	State            State        `json:"state"`
	ExitCode         *int         `json:"exit_code"`
	Command          []string     `json:"command"`
	Dir              string       `json:"dir"`
	Policy           string       `json:"policy"`
	Mode             string       `json:"mode"`
	EgressOpenReason string       `json:"egress_open_reason"`
	StartedAt        time.Time    `json:"started_at"`
	EndedAt          time.Time    `json:"ended_at"` // null while it runs (see MarshalJSON)
	Allowed          int          `json:"allowed"`
	Denied           int          `json:"denied"`
	WouldDeny        int          `json:"would_deny"`
	// Why is why the run ended the way it did: the refusal, a failure, a signal.
	Why      string `json:"why"`
	Landlock string `json:"landlock"`
	// Dispatch and Task name the dispatch and the task of the tasks file a
	// run is an attempt of; "" for a run of its own (postern run).
	Dispatch string `json:"dispatch"`
	Task     string `json:"task"`
	// Guarded names the files programs outside the wall obey that the run
	// made, replaced or changed where the wall could not hold them
	// read-only, each as a sentence ("PATH appeared during the run"): what
	// runs recorded before the wall's writes went by allow-list say.
	Guarded []string `json:"guarded"`
	// Writes says what became of the run's writes that did not reach the
	// host as written, each as a sentence: a git hook discarded, the files
	// written in the home outside its writable places, where they were kept.
	Writes []string `json:"writes"`
	// Pid and Host identify the controller process, so a run whose controller died
	// is seen as lost.
	Pid      int    `json:"pid"`
	PidStart uint64 `json:"pid_start"`
	// EventsDropped counts events that were counted in Allowed and Denied but
	// not stored, because the run made more than its event rate allows.
	EventsDropped int `json:"events_dropped"`
	// EventsLost counts events that could not be stored (the records file
	// full or failing); EventsError is the first failure.
	EventsLost  int    `json:"events_lost"`
	EventsError string `json:"events_error"`
	// Network is "none" for a run with no network at all (no door, no DNS,
	// only lo), "open" for one run with --egress-open, "" for one behind its
	// door.
	Network string `json:"network"`
	// Seal says, for a policy with guardrails, whether their seal held.
	Seal *Seal `json:"seal"`
	// PolicySHA256 is the sha256 of the policy file's bytes as the run was
	// given them (hex; "" for a run without one), and PolicyText those
	// bytes, up to MaxPolicyText (PolicyTextCut says it was cut there): the
	// record says what judged the run even after the file changes.
	PolicySHA256  string `json:"policy_sha256"`
	PolicyText    string `json:"policy_text"`
	PolicyTextCut bool   `json:"policy_text_cut"`
	// RunPid is the pid of the run's wall (its process tree's root) on the
	// machine it ran on, 0 if none was started or it is not known; Pid is
	// the controller's, here.
	RunPid int `json:"run_pid"`
	// EnvNames are the names of the variables passed to the run with --env
	// and the machine's env list; their values are never recorded.
	EnvNames []string `json:"env_names"`
	// End says how the run ended (End* constants); "" while it runs, and in
	// runs recorded before it was kept.
	End string `json:"end"`
	// Workspace is the copy of the caller's work the run worked in.
	Workspace *Workspace `json:"workspace"`
}

// MaxPolicyText bounds the policy text a run record keeps.
const MaxPolicyText = 64 << 10

// Seal is whether a run's policy's guardrail seal held: the lane can seal
// (a Linux network wall) and every guardrail answered a TCP connect at its
// address when the run started. Not held, the sealed hosts stay denied where
// the lane can seal; elsewhere the run is pointed at the guardrails but not
// forced through them.
type Seal struct {
	Held      bool   `json:"held"`
	Guardrail string `json:"guardrail"` // the guardrails' names, comma-separated
	Why       string `json:"why"`
}

// MarshalJSON writes every key of a run, always: one shape, whatever the
// run's state, with ended_at null while it runs (see appendRunJSON).
func (r Run) MarshalJSON() ([]byte, error) {
	return appendRunJSON(make([]byte, 0, 512+len(r.PolicyText)), &r)
}

// Ended reports whether the run has reached a final state.
func (r *Run) Ended() bool { return r.State != StateRunning }

// PutMachine adds or replaces a machine.
func (s *Store) PutMachine(m machine.Machine) error {
	return s.update(func(tx *bolt.Tx) error { return s.putJSON(tx, bucketMachines, m.Name, m) })
}

// Machine returns the named machine; local always exists.
func (s *Store) Machine(name string) (machine.Machine, error) {
	var m machine.Machine
	err := s.view(func(tx *bolt.Tx) (err error) {
		m, err = s.machineIn(tx, name)
		return err
	})
	return m, err
}

// machineIn reads the machine called name in tx; local, never added, is
// this machine as it is.
func (s *Store) machineIn(tx *bolt.Tx, name string) (machine.Machine, error) {
	var m machine.Machine
	err := s.getJSON(tx, bucketMachines, name, &m)
	if errors.Is(err, ErrNotFound) && name == machine.Local {
		return machine.LocalMachine(), nil
	}
	return m, err
}

// Machines lists every machine, local first.
func (s *Store) Machines() ([]machine.Machine, error) {
	out := []machine.Machine{}
	haveLocal := false
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketMachines)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			var m machine.Machine
			if err := s.decode(bucketMachines, string(k), v, &m); err != nil {
				return err
			}
			haveLocal = haveLocal || m.Name == machine.Local
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !haveLocal {
		out = append(out, machine.LocalMachine())
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Name == machine.Local) != (out[j].Name == machine.Local) {
			return out[i].Name == machine.Local
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// RemoveMachine deletes a machine and its probe record.
func (s *Store) RemoveMachine(name string) error {
	return s.update(func(tx *bolt.Tx) error {
		machines, err := s.bucket(tx, bucketMachines)
		if err != nil {
			return err
		}
		probes, err := s.bucket(tx, bucketProbes)
		if err != nil {
			return err
		}
		if machines.Get([]byte(name)) == nil {
			return fmt.Errorf("machine %q: %w", name, ErrNotFound)
		}
		if err := machines.Delete([]byte(name)); err != nil {
			return err
		}
		if err := probes.Delete([]byte(name)); err != nil {
			return err
		}
		return s.deleteAgents(tx, name)
	})
}

// PutRecord stores what probing measured. It is the only way a record is written.
func (s *Store) PutRecord(rec *rung.Record) error {
	return s.update(func(tx *bolt.Tx) error { return s.putJSON(tx, bucketProbes, rec.Name, rec) })
}

// Record returns the last measured record of a machine, or ErrNotFound if it was
// never measured.
func (s *Store) Record(name string) (*rung.Record, error) {
	var rec rung.Record
	if err := s.view(func(tx *bolt.Tx) error { return s.getJSON(tx, bucketProbes, name, &rec) }); err != nil {
		return nil, err
	}
	return &rec, nil
}

// MachineAndRecord returns the machine called name and its probe record (nil when
// it was never measured), read in one transaction: what a run reads before
// it chooses its carry.
func (s *Store) MachineAndRecord(name string) (machine.Machine, *rung.Record, error) {
	var (
		m   machine.Machine
		rec *rung.Record
	)
	err := s.view(func(tx *bolt.Tx) (err error) {
		if m, err = s.machineIn(tx, name); err != nil {
			return err
		}
		var r rung.Record
		switch err := s.getJSON(tx, bucketProbes, m.Name, &r); {
		case err == nil:
			rec = &r
		case !errors.Is(err, ErrNotFound):
			return err
		}
		return nil
	})
	if err != nil {
		return machine.Machine{}, nil, err
	}
	return m, rec, nil
}

// PutRun creates or replaces a run record, durably. When the records'
// filesystem is full, the room kept in reserve for this is given back and the
// write tried once more: a run's record outlasts its events.
func (s *Store) PutRun(r *Run) error {
	// Encoded before the transaction, without encoding/json's machinery.
	raw, err := appendRunJSON(make([]byte, 0, 512+len(r.PolicyText)), r)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucketRuns, r.ID, err)
	}
	put := func(tx *bolt.Tx) error { return s.putRaw(tx, bucketRuns, r.ID, raw) }
	err = s.update(put)
	if err != nil && isNoSpace(err) && s.releaseReserve() {
		err = s.update(put)
	}
	return err
}

// Run returns one run. A unique prefix of its id is enough.
func (s *Store) Run(id string) (*Run, error) {
	var found *Run
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRuns)
		if err != nil {
			return err
		}
		found, err = byPrefix[Run](s, b, bucketRuns, id, "run", "runs")
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// byPrefix decodes the one value of bucket b whose key is id, or the only
// one id is a prefix of; what and whats name its kind in errors.
func byPrefix[T any](s *Store, b *bolt.Bucket, bucket []byte, id, what, whats string) (*T, error) {
	var found *T
	n := 0
	if b != nil {
		c := b.Cursor()
		for k, v := c.Seek([]byte(id)); k != nil && len(k) >= len(id) && string(k[:len(id)]) == id; k, v = c.Next() {
			var x T
			if err := s.decode(bucket, string(k), v, &x); err != nil {
				return nil, err
			}
			found = &x
			n++
			if string(k) == id {
				n = 1
				break
			}
		}
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	case n > 1:
		return nil, fmt.Errorf("%s id prefix %q matches %d %s: give more of the id", what, id, n, whats)
	}
	return found, nil
}

// Runs lists every run, oldest first.
func (s *Store) Runs() ([]*Run, error) {
	out := []*Run{}
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRuns)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			var r Run
			if err := s.decode(bucketRuns, string(k), v, &r); err != nil {
				return err
			}
			out = append(out, &r)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out, err
}
