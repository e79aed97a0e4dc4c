package carry

import (
	"context"
	"errors"
	"sync"
	"syscall"
)

// Wall is one command behind a raised wall, not yet started: the door serves
// the wall's listeners, then Start starts the command inside. The network
// wall (carry/netwall), the container bridge (carry/container) and the
// connect door (carry/seatbelt) implement it; dispatch supervises every walled
// command through it alone.
type Wall interface {
	// Start starts the command inside the wall. It gives up when ctx is done,
	// and never holds up Signal or Close while it waits on the wall.
	Start(ctx context.Context) error
	// Signal forwards sig to the command's process group inside the wall.
	Signal(sig syscall.Signal) error
	// Wait waits for the command to end and returns its exit status (128+n
	// when signal n ended it).
	Wait() (int, error)
	// Close ends the command if it still runs and removes every trace of the
	// wall. It is idempotent.
	Close() error
}

// Errors a Wall's methods return, checked with errors.Is whatever the carry.
var (
	ErrNotStarted     = errors.New("wall: the command was not started")
	ErrAlreadyStarted = errors.New("wall: the command was already started")
	ErrClosed         = errors.New("wall: closed")
)

// Life is the state a Wall's methods share: not started, starting, started,
// closed. Start marks the start begun and ended around its exchange with
// the wall without holding a lock across it, so Signal and Close never wait
// on a slow start. The zero Life is a wall not yet started.
type Life struct {
	mu       sync.Mutex
	starting bool
	started  bool
	closed   bool
}

// BeginStart marks a start begun: ErrClosed after Close, ErrAlreadyStarted
// after (or during) another start.
func (l *Life) BeginStart() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case l.started || l.starting:
		return ErrAlreadyStarted
	}
	l.starting = true
	return nil
}

// EndStart marks the start ended, as started when ok. It returns ErrClosed
// when Close came while the start was under way: the caller then starts
// nothing more (what Close tears down is already going).
func (l *Life) EndStart(ok bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starting = false
	l.started = ok
	if l.closed {
		return ErrClosed
	}
	return nil
}

// CanSignal says whether a signal may be sent now: ErrClosed after Close,
// ErrNotStarted before the command started.
func (l *Life) CanSignal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case !l.started:
		return ErrNotStarted
	}
	return nil
}

// Started reports whether the command was started.
func (l *Life) Started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// Close marks the wall closed and reports whether the command had started.
func (l *Life) Close() (started bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.started
}
