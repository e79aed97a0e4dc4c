package records

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/door/event"
)

// AppendEvents stores events of one run in one durable transaction.
func (s *Store) AppendEvents(run string, evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.update(func(tx *bolt.Tx) error {
		events, err := s.bucket(tx, bucketEvents)
		if err != nil {
			return err
		}
		b, err := events.CreateBucketIfNotExists([]byte(run))
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
func (s *Store) Events(run string, after uint64) ([]event.Event, uint64, error) {
	var out []event.Event
	next := after
	err := s.view(func(tx *bolt.Tx) error {
		events, err := s.bucket(tx, bucketEvents)
		if err != nil {
			return err
		}
		b := events.Bucket([]byte(run))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			var ev event.Event
			if err := s.decode(bucketEvents, run, v, &ev); err != nil {
				return err
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

// How many events of one run are stored. A run cannot make its records grow
// faster than this: beyond it, events are counted (in the run's decisions and
// its record's events_dropped) but not stored.
const (
	DefaultEventRate  = 200  // events a second, sustained
	DefaultEventBurst = 2000 // events at once, after a quiet spell
)

// eventQueueMax bounds the events waiting for the disk; beyond it, events are
// dropped (counted, not stored) rather than stalling the door.
const eventQueueMax = 8192

// eventBatchWindow is how long the log gathers events before committing a
// batch, and eventBatchMax how many make it commit at once.
const (
	eventBatchWindow = 20 * time.Millisecond
	eventBatchMax    = 512
)

// maxRepeats bounds what one event may claim to stand for (a remote agent
// says so; the count must not overflow).
const maxRepeats = 1 << 30

// EventLogOptions are how an EventLog stores and reports.
type EventLogOptions struct {
	// Tee, if set, sees every event that is kept for storing (for live display).
	Tee func(event.Event)
	// Warn is told, once and at once, when events stop being stored.
	Warn io.Writer
	// Rate and Burst bound how many events are stored (a token bucket); zero
	// means DefaultEventRate and DefaultEventBurst.
	Rate  float64
	Burst int
}

// Tally is what an EventLog counted. Decisions are counted as the door made
// them, whether or not their events were stored: an event with Repeats n
// stands for n+1 decisions.
type Tally struct {
	Allowed, Denied, WouldDeny int
	// Stored events are on disk; Dropped ones were over the rate or the queue
	// bound; Lost ones could not be stored (Err is the first failure) or came
	// after Close.
	Stored, Dropped, Lost int
	Err                   error
}

// EventLog writes a run's events as they come, in small batches (group commit), so a
// busy run does not pay one fsync per connection and a crash loses no event whose
// batch was committed. It never blocks the door for the disk, never panics, and
// counts every decision for the run record even when its event is not stored.
type EventLog struct {
	store *Store
	run   string
	opts  EventLogOptions

	notify  chan struct{} // an event is pending (capacity 1)
	stop    chan struct{} // closed by Close: write what is pending, then end
	abandon chan struct{} // closed when Close gave up waiting: write nothing more
	done    chan struct{} // closed by the writer when it ends

	closeOnce, abandonOnce sync.Once

	mu      sync.Mutex
	closed  bool
	pending []event.Event
	tally   Tally
	tokens  float64
	last    time.Time
}

// NewEventLog starts writing events of run to the store. Close flushes and stops it.
func (s *Store) NewEventLog(run string, opts EventLogOptions) *EventLog {
	if opts.Rate <= 0 {
		opts.Rate = DefaultEventRate
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultEventBurst
	}
	l := &EventLog{store: s, run: run, opts: opts,
		notify: make(chan struct{}, 1), stop: make(chan struct{}),
		abandon: make(chan struct{}), done: make(chan struct{}),
		tokens: float64(opts.Burst)}
	go l.loop()
	return l
}

// Emit hands an event to the log. It never blocks on the disk and may be
// called from any goroutine, also after Close (the event is then counted as
// lost).
func (l *EventLog) Emit(ev event.Event) {
	ev.Repeats = min(max(ev.Repeats, 0), maxRepeats)
	l.mu.Lock()
	if ev.Event == event.Decided {
		n := 1 + ev.Repeats
		switch {
		case ev.Decision == event.Deny:
			l.tally.Denied += n
		case ev.WouldDeny:
			l.tally.WouldDeny += n
			l.tally.Allowed += n
		default:
			l.tally.Allowed += n
		}
	}
	keep := false
	switch {
	case l.closed:
		l.tally.Lost++
	case len(l.pending) >= eventQueueMax || !l.take(time.Now()):
		l.tally.Dropped++
	default:
		l.pending = append(l.pending, ev)
		keep = true
	}
	l.mu.Unlock()
	if !keep {
		return
	}
	if l.opts.Tee != nil {
		l.opts.Tee(ev)
	}
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// take spends a token of the rate bound, if there is one. l.mu is held.
func (l *EventLog) take(now time.Time) bool {
	if !l.last.IsZero() {
		l.tokens = min(float64(l.opts.Burst), l.tokens+now.Sub(l.last).Seconds()*l.opts.Rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

func (l *EventLog) loop() {
	defer close(l.done)
	for {
		select {
		case <-l.notify:
		case <-l.stop:
		}
		// Gather a batch: until the window ends, the batch is full, or Close.
		timer := time.NewTimer(eventBatchWindow)
	gather:
		for {
			l.mu.Lock()
			n, closed := len(l.pending), l.closed
			l.mu.Unlock()
			if n >= eventBatchMax || closed {
				break
			}
			select {
			case <-l.notify:
			case <-timer.C:
				break gather
			case <-l.stop:
			}
		}
		timer.Stop()
		l.mu.Lock()
		// closed is set before stop is closed, and Emit adds nothing once it
		// is: a batch taken with closed set is the last.
		batch, closed := l.pending, l.closed
		l.pending = nil
		l.mu.Unlock()
		l.write(batch)
		if closed {
			return
		}
	}
}

// write stores one batch, or counts it lost and says so the first time.
func (l *EventLog) write(batch []event.Event) {
	if len(batch) == 0 {
		return
	}
	var err error
	select {
	case <-l.abandon:
		err = fmt.Errorf("the run ended and its events were not written in time")
	default:
		err = l.store.AppendEvents(l.run, batch)
	}
	l.mu.Lock()
	if err == nil {
		l.tally.Stored += len(batch)
		l.mu.Unlock()
		return
	}
	l.tally.Lost += len(batch)
	first := l.tally.Err == nil
	if first {
		l.tally.Err = err
	}
	lost := l.tally.Lost
	l.mu.Unlock()
	if first && l.opts.Warn != nil {
		fmt.Fprintf(l.opts.Warn, "postern: events of run %s are not being recorded: %v; %d lost so far\n", l.run, err, lost)
	}
}

// Tally returns what the log counted so far.
func (l *EventLog) Tally() Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally
}

// Close stores every event handed to Emit before it and stops the writer. It
// waits at most until ctx is done; then what is not yet written is counted as
// lost and the writer ends after the transaction it is in. Calling it again
// waits again. The error says how many events were not stored, and why.
func (l *EventLog) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.stop)
	})
	select {
	case <-l.done:
	case <-ctx.Done():
		l.abandonOnce.Do(func() { close(l.abandon) })
		l.mu.Lock()
		n := len(l.pending)
		l.tally.Lost += n
		l.pending = nil
		l.mu.Unlock()
		return fmt.Errorf("flush events of run %s: %w; %d events not written", l.run, ctx.Err(), n)
	}
	t := l.Tally()
	if t.Err != nil {
		return fmt.Errorf("%d of its events were not recorded (%d were): %w", t.Lost, t.Stored, t.Err)
	}
	return nil
}
