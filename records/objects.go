package records

import (
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// Run states.
const (
	StateRefused = "refused"
	StateRunning = "running"
	StateExited  = "exited"
	StateFailed  = "failed"
	StateLost    = "lost"
)

// Run is one command line dispatched to one machine under one policy.
type Run struct {
	ID               string       `json:"id"`
	Machine          string       `json:"machine"`
	Lane             machine.Lane `json:"lane"`
	Carry            string       `json:"carry"`
	State            string       `json:"state"`
	ExitCode         *int         `json:"exit_code"`
	Command          []string     `json:"command"`
	Dir              string       `json:"dir,omitempty"`
	Policy           string       `json:"policy"`
	Mode             string       `json:"mode,omitempty"`
	EgressOpenReason string       `json:"egress_open_reason"`
	StartedAt        time.Time    `json:"started_at"`
	EndedAt          time.Time    `json:"ended_at,omitzero"`
	Allowed          int          `json:"allowed"`
	Denied           int          `json:"denied"`
	WouldDeny        int          `json:"would_deny,omitempty"`
	// Why is why the run ended the way it did: the refusal, a failure, a signal.
	Why      string `json:"why,omitempty"`
	Landlock string `json:"landlock,omitempty"`
	// Guarded names the files programs outside the wall obey that the run
	// made, replaced or changed where the wall could not hold them
	// read-only, each as a sentence ("PATH appeared during the run"): what
	// runs recorded before the wall's writes went by allow-list say.
	Guarded []string `json:"guarded,omitempty"`
	// Writes says what became of the run's writes that did not reach the
	// host as written, each as a sentence: a git hook discarded, the files
	// written in the home outside its writable places, where they were kept.
	Writes []string `json:"writes,omitempty"`
	// Pid and Host identify the controller process, so a run whose controller died
	// is seen as lost.
	Pid      int    `json:"pid,omitempty"`
	PidStart uint64 `json:"pid_start,omitempty"`
	// EventsDropped counts events that were counted in Allowed and Denied but
	// not stored, because the run made more than its event rate allows.
	EventsDropped int `json:"events_dropped,omitempty"`
	// EventsLost counts events that could not be stored (the records file
	// full or failing); EventsError is the first failure.
	EventsLost  int    `json:"events_lost,omitempty"`
	EventsError string `json:"events_error,omitempty"`
	// Network is "none" for a run with no network at all (no door, no DNS,
	// only lo), "open" for one run with --egress-open, "" for one behind its
	// door.
	Network string `json:"network,omitempty"`
	// Seal says, for a policy with guardrails, whether their seal held.
	Seal *Seal `json:"seal,omitempty"`
}

// Seal is whether a run's policy's guardrail seal held: the lane can seal
// (a Linux network wall) and every guardrail answered a TCP connect at its
// address when the run started. Not held, the sealed hosts stay denied where
// the lane can seal; elsewhere the run is pointed at the guardrails but not
// forced through them.
type Seal struct {
	Held      bool   `json:"held"`
	Guardrail string `json:"guardrail"` // the guardrails' names, comma-separated
	Why       string `json:"why,omitempty"`
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
	err := s.view(func(tx *bolt.Tx) error { return s.getJSON(tx, bucketMachines, name, &m) })
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

// PutRun creates or replaces a run record, durably. When the records'
// filesystem is full, the room kept in reserve for this is given back and the
// write tried once more: a run's record outlasts its events.
func (s *Store) PutRun(r *Run) error {
	put := func(tx *bolt.Tx) error { return s.putJSON(tx, bucketRuns, r.ID, r) }
	err := s.update(put)
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
		c := b.Cursor()
		n := 0
		for k, v := c.Seek([]byte(id)); k != nil && len(k) >= len(id) && string(k[:len(id)]) == id; k, v = c.Next() {
			var r Run
			if err := s.decode(bucketRuns, string(k), v, &r); err != nil {
				return err
			}
			found = &r
			n++
			if string(k) == id {
				n = 1
				break
			}
		}
		switch {
		case n == 0:
			return fmt.Errorf("run %q: %w", id, ErrNotFound)
		case n > 1:
			return fmt.Errorf("run id prefix %q matches %d runs: give more of the id", id, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
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
