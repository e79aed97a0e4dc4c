package main

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
)

// lockedWriter collects writes from the printer's goroutines.
type lockedWriter struct {
	mu     sync.Mutex
	b      strings.Builder
	writes int
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.b.Write(p)
}

func (w *lockedWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(strings.TrimSuffix(w.b.String(), "\n"), "\n")
}

func TestEventPrinterBatchesAllowsAndWritesDenialsAtOnce(t *testing.T) {
	var w lockedWriter
	p := newEventPrinter(&w)
	for i := range 3 {
		p.Emit(door.Event{Event: "decision", Conn: uint64(i + 1), Decision: "allow"})
	}
	w.mu.Lock()
	early := w.writes
	w.mu.Unlock()
	if early != 0 {
		t.Fatalf("allowed decisions written at once (%d writes), want them batched", early)
	}
	// A denial goes out at once, after what was queued before it.
	p.Emit(door.Event{Event: "decision", Conn: 4, Decision: "deny"})
	if got := w.lines(); len(got) != 4 {
		t.Fatalf("after a denial %d lines are out, want 4: %q", len(got), got)
	}
	w.mu.Lock()
	if w.writes != 1 {
		t.Errorf("4 events took %d writes, want 1", w.writes)
	}
	w.mu.Unlock()
	// A queued event is out within the print delay, without Close.
	p.Emit(door.Event{Event: "end", Conn: 1, Decision: "allow"})
	deadline := time.Now().Add(2 * time.Second)
	for len(w.lines()) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("queued event not written within 2s: %q", w.lines())
		}
		time.Sleep(time.Millisecond)
	}
	p.Emit(door.Event{Event: "end", Conn: 2, Decision: "allow"})
	p.Close()
	lines := w.lines()
	if len(lines) != 6 {
		t.Fatalf("after Close %d lines, want 6: %q", len(lines), lines)
	}
	for i, want := range []uint64{1, 2, 3, 4, 1, 2} {
		var ev door.Event
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil || ev.Conn != want {
			t.Fatalf("line %d = %q (%v), want conn %d", i, lines[i], err, want)
		}
	}
}
