package carry

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLifeStates(t *testing.T) {
	var l Life
	if err := l.CanSignal(); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("signal before start: %v, want ErrNotStarted", err)
	}
	if err := l.BeginStart(); err != nil {
		t.Fatal(err)
	}
	if err := l.BeginStart(); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("a second start while the first is under way: %v, want ErrAlreadyStarted", err)
	}
	if err := l.CanSignal(); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("signal while starting: %v, want ErrNotStarted", err)
	}
	if err := l.EndStart(true); err != nil {
		t.Fatal(err)
	}
	if err := l.CanSignal(); err != nil || !l.Started() {
		t.Fatalf("after a start: signal %v, started %v", err, l.Started())
	}
	if err := l.BeginStart(); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("start after start: %v, want ErrAlreadyStarted", err)
	}
	if !l.Close() {
		t.Fatal("Close did not say the command had started")
	}
	if err := l.CanSignal(); !errors.Is(err, ErrClosed) {
		t.Fatalf("signal after Close: %v, want ErrClosed", err)
	}
	if err := l.BeginStart(); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after Close: %v, want ErrClosed", err)
	}
}

// Close while a start is under way neither waits for it nor lets it
// succeed afterwards; a failed start can be tried again.
func TestLifeCloseDuringStart(t *testing.T) {
	var l Life
	if err := l.BeginStart(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan bool, 1)
	go func() { closed <- l.Close() }()
	select {
	case started := <-closed:
		if started {
			t.Fatal("Close during a start said the command had started")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a start under way")
	}
	if err := l.EndStart(true); !errors.Is(err, ErrClosed) {
		t.Fatalf("a start that ended after Close: %v, want ErrClosed", err)
	}

	var again Life
	if err := again.BeginStart(); err != nil {
		t.Fatal(err)
	}
	if err := again.EndStart(false); err != nil {
		t.Fatal(err)
	}
	if err := again.BeginStart(); err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
}

// Many starts at once: exactly one begins.
func TestLifeOneStartWins(t *testing.T) {
	var l Life
	var wg sync.WaitGroup
	var mu sync.Mutex
	began := 0
	for range 32 {
		wg.Go(func() {
			if l.BeginStart() == nil {
				mu.Lock()
				began++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if began != 1 {
		t.Fatalf("%d starts began, want 1", began)
	}
}
