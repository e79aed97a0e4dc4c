package records

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/door"
)

// AppendEvents stores events of one run in one durable transaction and returns the
// sequence number of the last one.
func (s *Store) AppendEvents(run string, evs []door.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(run))
		if err != nil {
			return err
		}
		for _, ev := range evs {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			raw, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("encode event: %w", err)
			}
			if err := b.Put(seqKey(seq), raw); err != nil {
				return err
			}
		}
		return nil
	})
}

// Events returns the run's events with sequence numbers above after, and the
// sequence number to pass next time.
func (s *Store) Events(run string, after uint64) ([]door.Event, uint64, error) {
	var out []door.Event
	next := after
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(run))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			var ev door.Event
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("decode event of run %s: %w", run, err)
			}
			out = append(out, ev)
			next = bytesToSeq(k)
		}
		return nil
	})
	return out, next, err
}

func bytesToSeq(k []byte) uint64 {
	var n uint64
	for _, b := range k {
		n = n<<8 | uint64(b)
	}
	return n
}

// EventLog writes a run's events as they come, in small batches (group commit), so a
// busy run does not pay one fsync per connection and a crash loses no event whose
// batch was committed. Counts of allowed and denied decisions are kept for the run
// record.
type EventLog struct {
	store *Store
	run   string
	in    chan door.Event
	done  chan struct{}
	once  sync.Once

	mu                        sync.Mutex
	allowed, denied, wouldDen int
	err                       error
	tee                       func(door.Event)
}

// eventBatchWindow is how long the log gathers events before committing a batch.
const eventBatchWindow = 20 * time.Millisecond

// NewEventLog starts writing events of run to the store. tee, if not nil, also sees
// every event (for live display). Close flushes and stops it.
func (s *Store) NewEventLog(run string, tee func(door.Event)) *EventLog {
	l := &EventLog{store: s, run: run, in: make(chan door.Event, 4096), done: make(chan struct{}), tee: tee}
	go l.loop()
	return l
}

// Emit hands an event to the log. It blocks only when thousands of events are
// waiting for the disk, which slows the run rather than losing an event.
func (l *EventLog) Emit(ev door.Event) {
	if ev.Event == "decision" {
		l.mu.Lock()
		switch {
		case ev.Decision == "deny":
			l.denied++
		case ev.WouldDeny:
			l.wouldDen++
			l.allowed++
		default:
			l.allowed++
		}
		l.mu.Unlock()
	}
	if l.tee != nil {
		l.tee(ev)
	}
	l.in <- ev
}

func (l *EventLog) loop() {
	defer close(l.done)
	for {
		ev, ok := <-l.in
		if !ok {
			return
		}
		batch := []door.Event{ev}
		timer := time.NewTimer(eventBatchWindow)
	gather:
		for len(batch) < 512 {
			select {
			case ev, ok := <-l.in:
				if !ok {
					break gather
				}
				batch = append(batch, ev)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		if err := l.store.AppendEvents(l.run, batch); err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = fmt.Errorf("record events of run %s: %w", l.run, err)
			}
			l.mu.Unlock()
		}
	}
}

// Counts returns how many decisions allowed, denied, and allowed only because the
// policy observes.
func (l *EventLog) Counts() (allowed, denied, wouldDeny int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowed, l.denied, l.wouldDen
}

// Close flushes every event handed to Emit and stops the writer. It waits at most
// until ctx is done.
func (l *EventLog) Close(ctx context.Context) error {
	l.once.Do(func() { close(l.in) })
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("flush events of run %s: %w", l.run, ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
