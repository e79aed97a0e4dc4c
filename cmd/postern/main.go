// Command postern dispatches agent runs to machines behind an egress wall whose only
// way out is a door that judges every connection by policy.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	_ "github.com/postern-dev/postern/cmd/postern/internal/first" // first: see its doc
	"github.com/postern-dev/postern/internal/hugetext"
	"github.com/postern-dev/postern/internal/signals"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// exitError carries an exit status chosen by a command (see exit.go).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

var rootCmd = &cobra.Command{
	Use:           "postern",
	Short:         "Run AI coding agents behind an egress wall whose only way out is a policy door",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       version,
}

// buildCommands make the command line, in the order their files' init
// functions added them. main runs them once it knows it is not one of its own
// re-executed stages, which need none of it: each wall start pays for the
// start of this binary twice.
var buildCommands []func()

func main() {

	keepInheritedFromChildren()
	if run, ok := reexecEntry(os.Args); ok {
		os.Exit(run()) // postern re-executed as one of its own stages: no command line
	}
	leaveCoresEarly(os.Args)
	for _, build := range buildCommands {
		build()
	}
	strictCommands(rootCmd)
	ctx, stop := interruptible()
	defer stop()
	err := rootCmd.ExecuteContext(ctx)

	if err == nil {
		hugetext.Exit(0)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "postern:", ee.err)
		}
		hugetext.Exit(ee.code)
	}
	fmt.Fprintln(stderr, "postern:", err)
	hugetext.Exit(1)
}

// interruptible is signal.NotifyContext for os.Interrupt and SIGTERM, with
// the signals held beside the command's own work (see signals.Hold), and
// a command may take them over (caught.take) to pass them on itself.
func interruptible() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := make(chan os.Signal, 4)
	caught.cancel = cancel
	caught.held = signals.Hold(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		// Lives with the process, as the signals' registration does.
		for sig := range c {
			caught.route(sig)
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// caught routes os.Interrupt and SIGTERM (see interruptible).
var caught interrupts

// interrupts routes os.Interrupt and SIGTERM: each cancels the command's
// context, until a command takes them.
type interrupts struct {
	mu     sync.Mutex
	to     chan<- os.Signal
	first  os.Signal // the one that cancelled the context
	cancel context.CancelCauseFunc
	held   <-chan struct{}
}

func (i *interrupts) route(sig os.Signal) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.to != nil {
		select {
		case i.to <- sig:
		default: // full: dropped, as signal.Notify drops
		}
		return
	}
	if i.first == nil {
		i.first = sig
		i.cancel(errors.New(sig.String() + " signal received"))
	}
}

// registered is closed once os.Interrupt and SIGTERM are no longer ignored
// but relayed (see interruptible): from then on a child starts with them at
// their default.
func (i *interrupts) registered() <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.heldLocked()
}

// heldLocked is registered with i.mu held.
func (i *interrupts) heldLocked() <-chan struct{} {
	if i.held == nil {
		// Never held (no interruptible): nothing to wait for.
		held := make(chan struct{})
		close(held)
		return held
	}
	return i.held
}

// take has os.Interrupt and SIGTERM sent on c from now on, rather than
// cancelling the command's context; one that cancelled it already is sent
// first. It returns a channel closed once they are held.
func (i *interrupts) take(c chan<- os.Signal) <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.to = c
	if i.first != nil {
		select {
		case c <- i.first:
		default:
		}
	}
	return i.heldLocked()
}
