package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultStopGrace bounds how long a cancelled dispatch waits for its runs'
// stops to be confirmed.
const DefaultStopGrace = 5 * time.Second

// Config is one dispatch.
type Config struct {
	// ID names the dispatch; "" makes a new one.
	ID   string
	File *File
	// Machines is the inventory, each machine with its last record. The
	// file's pool is taken from it; without a pool in the file, it is the
	// pool, in this order.
	Machines []Machine
	// Max bounds the runs at once in the whole dispatch (--max); 0 takes
	// the file's max, which 0 leaves to the slots.
	Max    int
	Runner Runner
	// OnChange sees every change, in order, from the dispatch's goroutine,
	// with a copy of the record as it stands after it, which it may keep. It
	// must return quickly and must not call into the dispatch.
	OnChange func(Change, *Record)
	// Clock is the dispatch's time; nil is the real one.
	Clock  Clock
	Logger *slog.Logger
	// StopGrace bounds how long a cancelled dispatch waits for its runs to
	// confirm their stop; 0 is DefaultStopGrace.
	StopGrace time.Duration
}

// ErrTimedOut is the cause (context.Cause) of an attempt's context that was
// cancelled because its task's timeout passed.
var ErrTimedOut = errors.New("the task's timeout passed")

// ErrNoRunner is a Config without a Runner.
var ErrNoRunner = errors.New("fleet: no runner to start the tasks with")

// Run places the file's tasks on the machines and follows them to the end. It
// returns the dispatch's final record; every task's outcome is in it (see
// ExitCode). An error is a dispatch that could not begin: a file that does not
// fit the inventory; nothing was started then.
//
// When ctx is cancelled, queued tasks never start and running ones are asked
// to stop; Run returns once every run has confirmed its stop, or StopGrace
// after the cancel, whichever is first.
func Run(ctx context.Context, cfg Config) (*Record, error) {
	if cfg.Runner == nil {
		return nil, ErrNoRunner
	}
	if cfg.File == nil {
		return nil, errors.New("fleet: no tasks file")
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	grace := cfg.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	id := cfg.ID
	if id == "" {
		id = NewID(clock.Now())
	}
	maxRuns := cfg.Max
	if maxRuns <= 0 {
		maxRuns = cfg.File.Max
	}
	s, err := newSched(id, cfg.File, cfg.Machines, maxRuns, clock.Now())
	if err != nil {
		return nil, err
	}
	logger = logger.With("dispatch", id)

	in := newInbox()
	defer in.close()
	type live struct {
		cancel context.CancelCauseFunc
		timer  Timer
	}
	lives := map[int]*live{}
	defer func() {
		for _, l := range lives {
			l.cancel(nil)
			if l.timer != nil {
				l.timer.Stop()
			}
		}
	}()

	emit := func() {
		if len(s.out) == 0 {
			return
		}
		out := s.out
		s.out = nil
		if cfg.OnChange == nil {
			return
		}
		snap := s.rec.Clone()
		for _, c := range out {
			cfg.OnChange(c, snap)
		}
	}
	// refill gives back what ended attempts held and fills free slots; it
	// runs after every event, so that a slot is taken again at once.
	refill := func() {
		for _, aid := range s.ended {
			if l := lives[aid]; l != nil {
				l.cancel(nil)
				if l.timer != nil {
					l.timer.Stop()
				}
				delete(lives, aid)
			}
		}
		s.ended = s.ended[:0]
		for _, a := range s.place(clock.Now()) {
			actx, cancel := context.WithCancelCause(ctx)
			l := &live{cancel: cancel}
			lives[a.ID] = l
			if a.Task.Timeout > 0 {
				aid := a.ID
				l.timer = clock.AfterFunc(a.Task.Timeout, func() { in.put(RunEvent{Attempt: aid, Kind: runTimedOut}) })
			}
			logger.Debug("placed", "task", a.Task.Name, "machine", a.Machine.Name, "attempt", a.ID, "carry", string(a.Carry))
			cfg.Runner.Start(actx, a, in.put)
		}
	}

	ctxDone := ctx.Done()
	var graceTimer Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	if ctx.Err() != nil {
		ctxDone = nil
		s.cancel(clock.Now())
	}
	refill()
	emit()
	cancelled := func() {
		ctxDone = nil
		// The attempts' contexts derive from ctx: they are cancelled
		// already. What the dispatch still owns is its queue.
		s.cancel(clock.Now())
		graceTimer = clock.AfterFunc(grace, func() { in.put(RunEvent{Kind: runGraceOver}) })
	}
	for !s.done() {
		select {
		case <-in.wake:
			// A run stopped by the cancel may report its end before the
			// dispatch sees ctx done: the cancel comes first, so that the
			// end is recorded cancelled and its slot is not taken again.
			if ctxDone != nil && ctx.Err() != nil {
				cancelled()
			}
			for _, ev := range in.take() {
				now := clock.Now()
				if ev.Kind == runGraceOver {
					s.graceOver(grace, now)
					continue
				}
				stop, known := s.handle(ev, now)
				if !known && ev.Kind < runTimedOut {
					logger.Warn("runner event ignored: its attempt is not running", "attempt", ev.Attempt, "kind", int(ev.Kind))
				}
				if stop {
					if l := lives[ev.Attempt]; l != nil {
						l.cancel(ErrTimedOut)
					}
				}
				refill()
			}
		case <-ctxDone:
			cancelled()
		}
		emit()
	}
	s.finish(clock.Now())
	emit()
	return s.rec, nil
}

// NewID makes a dispatch id: its start time and random hex, like a run's.
func NewID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// inbox is the runners' way in: put never blocks (a runner may report from
// inside Start), and wake says there is something to take.
type inbox struct {
	mu     sync.Mutex
	evs    []RunEvent
	closed bool
	wake   chan struct{}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

func (b *inbox) put(ev RunEvent) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.evs = append(b.evs, ev)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []RunEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	evs := b.evs
	b.evs = nil
	return evs
}

func (b *inbox) close() {
	b.mu.Lock()
	b.closed = true
	b.evs = nil
	b.mu.Unlock()
}
