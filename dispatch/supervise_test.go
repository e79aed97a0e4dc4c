package dispatch

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry"
)

// fakeWall is a carry.Wall whose command ends when it gets a signal in
// endOn, with 128+n; with slowStart its Start waits for ctx.
type fakeWall struct {
	slowStart bool
	endOn     map[syscall.Signal]bool

	mu      sync.Mutex
	signals []syscall.Signal
	closed  bool
	life    carry.Life
	ended   chan int
}

func newFakeWall() *fakeWall { return &fakeWall{ended: make(chan int, 1)} }

func (w *fakeWall) Start(ctx context.Context) error {
	if err := w.life.BeginStart(); err != nil {
		return err
	}
	if w.slowStart {
		<-ctx.Done()
		_ = w.life.EndStart(false)
		return ctx.Err()
	}
	return w.life.EndStart(true)
}

func (w *fakeWall) Signal(sig syscall.Signal) error {
	if err := w.life.CanSignal(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.signals = append(w.signals, sig)
	if w.endOn[sig] {
		select {
		case w.ended <- 128 + int(sig):
		default:
		}
	}
	return nil
}

func (w *fakeWall) Wait() (int, error) {
	if !w.life.Started() {
		return -1, carry.ErrNotStarted
	}
	return <-w.ended, nil
}

func (w *fakeWall) Close() error {
	w.life.Close()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.ended <- 128 + int(syscall.SIGKILL):
	default:
	}
	return nil
}

func (w *fakeWall) got() []syscall.Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]syscall.Signal(nil), w.signals...)
}

// A start that hangs is bounded by the run's context.
func TestSuperviseStartBoundedByContext(t *testing.T) {
	w := newFakeWall()
	w.slowStart = true
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := superviseWall(ctx, w, nil, nil, time.Second, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("superviseWall = %v, want the start to end with its context", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("superviseWall did not return when its context ended during the start")
	}
}

// Signals reach the command, SIGWINCH without a terminal does not; the end
// of ctx sends SIGTERM, and SIGKILL and Close after the grace.
func TestSuperviseSignalsThenGrace(t *testing.T) {
	w := newFakeWall()
	w.endOn = map[syscall.Signal]bool{syscall.SIGKILL: true}
	sigs := make(chan os.Signal, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := superviseWall(ctx, w, nil, sigs, 100*time.Millisecond, func() { close(started) })
		done <- result{code, err}
	}()
	<-started
	sigs <- syscall.SIGWINCH
	sigs <- syscall.SIGHUP
	deadline := time.Now().Add(5 * time.Second)
	for len(w.got()) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("superviseWall did not end after the grace")
	}
	want := []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL}
	got := w.got()
	if len(got) != len(want) {
		t.Fatalf("signals %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("signals %v, want %v", got, want)
		}
	}
	if r.err != nil || r.code != 128+int(syscall.SIGKILL) {
		t.Fatalf("superviseWall = %d, %v; want %d", r.code, r.err, 128+int(syscall.SIGKILL))
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if !closed {
		t.Fatal("the wall was not closed after SIGKILL")
	}
}
