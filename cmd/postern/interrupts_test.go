package main

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestInterruptsBeforeAndAfterTake: before a command takes os.Interrupt and
// SIGTERM, the first cancels the context (with the signal as its cause);
// taking them then hands that one on, and every later one goes to the
// taker alone.
func TestInterruptsBeforeAndAfterTake(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	held := make(chan struct{})
	close(held)
	i := interrupts{cancel: cancel, held: held}

	i.route(os.Interrupt)
	i.route(syscall.SIGTERM)
	if ctx.Err() == nil {
		t.Fatal("an interrupt before take did not cancel the context")
	}
	if got := context.Cause(ctx).Error(); got != "interrupt signal received" {
		t.Errorf("cause %q, want the first signal's", got)
	}

	c := make(chan os.Signal, 4)
	<-i.take(c)
	if len(c) != 1 {
		t.Fatalf("take handed on %d signals, want the one that came first", len(c))
	}
	if got := <-c; got != os.Interrupt {
		t.Fatalf("take handed on %v, want the interrupt that came first", got)
	}
	i.route(syscall.SIGTERM)
	select {
	case got := <-c:
		if got != syscall.SIGTERM {
			t.Errorf("after take: %v, want SIGTERM", got)
		}
	default:
		t.Error("a SIGTERM after take did not reach the taker")
	}
}
