// Command postern dispatches agent runs to machines behind an egress wall whose only
// way out is a door that judges every connection by policy.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/cobra"

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
// the signals asked for beside the command's own work (see signals.Notify):
// one that comes before they are held ends the process, as one before main
// would.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 1)
	signals.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
