package records

import (
	"encoding/json"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketDispatches holds dispatches. It is made on the first write, so a
// store from before dispatches reads as one with none.
var bucketDispatches = []byte("dispatches")

// Dispatch states, besides the ones its record holds (running, ended,
// cancelled).
const (
	// DispatchLost is a dispatch whose controller ended without finishing it.
	DispatchLost = "lost"
)

// Dispatch is one dispatch of a tasks file: who carries it (Pid, PidStart,
// so that a controller that died is seen), and its record as the dispatch
// keeps it (its tasks, their attempts and, once ended, its summary), kept as
// the JSON the dispatch wrote: the records do not interpret it beyond the
// fields here.
type Dispatch struct {
	ID        string    `json:"id"`
	File      string    `json:"file"`
	State     string    `json:"state"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Pid       int       `json:"pid,omitempty"`
	PidStart  uint64    `json:"pid_start,omitempty"`
	// Detached is a dispatch carried by a background process of its own.
	Detached bool `json:"detached,omitempty"`
	// Why says why a dispatch ended other than by its tasks: its
	// controller lost, a failure to begin.
	Why    string          `json:"why,omitempty"`
	Record json.RawMessage `json:"record,omitempty"`
}

// PutDispatch creates or replaces a dispatch, durably.
func (s *Store) PutDispatch(d *Dispatch) error {
	put := func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketDispatches); err != nil {
			return err
		}
		return s.putJSON(tx, bucketDispatches, d.ID, d)
	}
	err := s.update(put)
	if err != nil && isNoSpace(err) && s.releaseReserve() {
		err = s.update(put)
	}
	return err
}

// Dispatch returns one dispatch. A unique prefix of its id is enough.
func (s *Store) Dispatch(id string) (*Dispatch, error) {
	var found *Dispatch
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		found, err = byPrefix[Dispatch](s, tx.Bucket(bucketDispatches), bucketDispatches, id, "dispatch", "dispatches")
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// Dispatches lists every dispatch, oldest first.
func (s *Store) Dispatches() ([]*Dispatch, error) {
	out := []*Dispatch{}
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDispatches)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var d Dispatch
			if err := s.decode(bucketDispatches, string(k), v, &d); err != nil {
				return err
			}
			out = append(out, &d)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out, err
}
