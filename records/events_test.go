package records

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// syncBuffer is a bytes.Buffer safe for the log's writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Emit from many goroutines while Close runs: no panic, no event counted
// twice or not at all, Close idempotent, and nothing left running.
func TestEventLogEmitWhileClosing(t *testing.T) {
	before := runtime.NumGoroutine()
	for round := range 20 {
		s := openTemp(t)
		l := s.NewEventLog("r1", EventLogOptions{Burst: 1 << 20, Rate: 1 << 20})
		var (
			wg      sync.WaitGroup
			emitted atomic.Int64
			start   = make(chan struct{})
		)
		for g := range 16 {
			wg.Go(func() {
				<-start
				for i := range 200 {
					l.Emit(event.Event{Event: "decision", Decision: "deny", Conn: uint64(g*1000 + i)})
					emitted.Add(1)
				}
			})
		}
		close(start)
		if round%2 == 0 {
			time.Sleep(time.Duration(round) * 100 * time.Microsecond)
		}
		errs := make(chan error, 2)
		go func() { errs <- l.Close(context.Background()) }()
		go func() { errs <- l.Close(context.Background()) }()
		wg.Wait()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		}
		l.Emit(event.Event{Event: "decision", Decision: "deny"}) // after Close: counted, never a panic
		emitted.Add(1)
		tl := l.Tally()
		if int64(tl.Denied) != emitted.Load() || int64(tl.Stored+tl.Lost+tl.Dropped) != emitted.Load() {
			t.Fatalf("round %d: emitted %d, tally %+v", round, emitted.Load(), tl)
		}
		evs, _, err := s.Events("r1", 0)
		if err != nil || len(evs) != tl.Stored {
			t.Fatalf("round %d: %d events stored, tally says %d (%v)", round, len(evs), tl.Stored, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines left running (%d before)", n, before)
	}
}

// A flood of events beyond the rate is counted, not stored.
func TestEventLogRateBound(t *testing.T) {
	s := openTemp(t)
	var shown atomic.Int64
	l := s.NewEventLog("r1", EventLogOptions{Rate: 100, Burst: 500, Tee: func(event.Event) { shown.Add(1) }})
	const n = 20000
	start := time.Now()
	for range n {
		l.Emit(event.Event{Event: "decision", Decision: "deny", Kind: "dns", Host: "x.test"})
	}
	took := time.Since(start)
	// Repeats count as decisions too.
	l.Emit(event.Event{Event: "decision", Decision: "deny", Kind: "dns", Host: "y.test", Repeats: 41})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tl := l.Tally()
	maxStored := 500 + int(took.Seconds()*100) + 2
	if tl.Denied != n+42 || tl.Stored > maxStored || tl.Stored < 500 || tl.Stored+tl.Dropped != n+1 {
		t.Fatalf("tally %+v after %d events in %s; want %d denied, at most %d stored", tl, n+1, took, n+42, maxStored)
	}
	if int(shown.Load()) != tl.Stored {
		t.Fatalf("%d events shown live, %d stored: the live view shows what is stored", shown.Load(), tl.Stored)
	}
	// The budget refills.
	l2 := s.NewEventLog("r2", EventLogOptions{Rate: 1000, Burst: 10})
	for range 10 {
		l2.Emit(event.Event{Event: "decision"})
	}
	time.Sleep(50 * time.Millisecond)
	for range 10 {
		l2.Emit(event.Event{Event: "decision"})
	}
	_ = l2.Close(context.Background())
	if tl := l2.Tally(); tl.Stored < 20-1 {
		t.Fatalf("after the bucket refilled: %+v", tl)
	}
}

// A store that fails is said at once, once, on Warn; the decisions are still
// counted, and the failure is in Close's error.
func TestEventLogStoreFailsSaysSoOnce(t *testing.T) {
	s := openTemp(t)
	var warn syncBuffer
	l := s.NewEventLog("r1", EventLogOptions{Warn: &warn})
	l.Emit(event.Event{Event: "decision", Decision: "allow"})
	waitStored(t, l, 1)
	// The records file replaced by a directory while the run goes on.
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		l.Emit(event.Event{Event: "decision", Decision: "deny"})
		if i%100 == 0 {
			time.Sleep(3 * eventBatchWindow)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(warn.String(), "not being recorded") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	err := l.Close(context.Background())
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "300 of its events were not recorded") {
		t.Fatalf("Close: %v", err)
	}
	w := warn.String()
	if strings.Count(w, "\n") != 1 || !strings.HasPrefix(w, "postern: events of run r1 are not being recorded: records file "+s.Path()+" is damaged (a directory)") || !strings.Contains(w, "lost so far") {
		t.Fatalf("warnings: %q; want one line naming the run, the file and what it is", w)
	}
	if tl := l.Tally(); tl.Allowed != 1 || tl.Denied != 300 || tl.Lost != 300 || tl.Stored != 1 {
		t.Fatalf("tally %+v", tl)
	}
}

func waitStored(t *testing.T, l *EventLog, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Tally().Stored < n {
		if time.Now().After(deadline) {
			t.Fatalf("stored %+v, want %d", l.Tally(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A shutdown that outlasts its bound: the disk stalls (the store's lock is
// held, as a slow fsync would hold it), Close gives up when its context ends,
// and an event the door sends after that is dropped and counted, never a
// panic; the writer, owned by the log, still ends once the disk answers, and
// every event is stored or counted exactly once.
func TestEventLogLateEventAfterSlowClose(t *testing.T) {
	s := openTemp(t)
	l := s.NewEventLog("r1", EventLogOptions{})
	s.mu.Lock() // the disk stalls
	stalled := true
	defer func() {
		if stalled {
			s.mu.Unlock()
		}
	}()
	const early = 10
	for i := range early {
		l.Emit(event.Event{Event: event.Decided, Decision: event.Allow, Host: "early.test", Conn: uint64(i)})
	}
	// Let the writer take its batch and block on the stalled disk.
	time.Sleep(5 * eventBatchWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close on a stalled disk = %v, want it to give up at its deadline", err)
	}
	l.Emit(event.Event{Event: event.Decided, Decision: event.Deny, Host: "late.test", Conn: 99})
	tl := l.Tally()
	if tl.Denied != 1 || tl.Allowed != early || tl.Lost < 1 {
		t.Fatalf("after the late event: tally %+v, want it counted (denied 1) and lost", tl)
	}
	select {
	case <-l.done:
		t.Fatal("the writer ended while the disk was still stalled")
	default:
	}
	s.mu.Unlock()
	stalled = false
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not end once the disk answered")
	}
	tl = l.Tally()
	if tl.Stored+tl.Lost+tl.Dropped != early+1 {
		t.Fatalf("tally %+v: %d events emitted, each must be stored or counted once", tl, early+1)
	}
	evs, _, err := s.Events("r1", 0)
	if err != nil || len(evs) != tl.Stored {
		t.Fatalf("%d events stored, tally says %d (%v)", len(evs), tl.Stored, err)
	}
	for _, ev := range evs {
		if ev.Host == "late.test" {
			t.Fatalf("the event sent after Close gave up was stored: %+v", ev)
		}
	}
}
