package netwall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/postern-dev/postern/internal/signals"
)

// ForwardedSignals are passed by the wall's init to the run (and by a
// container's, which forwards the same).
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// InitMain is the main of a process started with InitArg: the wall's init,
// whose exit status it returns. Whatever binary it is (postern, or the init
// of its own, cmd/postern-wall) calls it before anything else, with the
// arguments after InitArg.
func InitMain(args []string) int {
	sigs := make(chan os.Signal, 8)
	// SIGWINCH: the init resizes the run's terminal. SIGINT and SIGTERM
	// are the run's to handle: the init passes them on instead of
	// stopping. Asked for beside the wall's setup (ignored until then),
	// held before the command starts.
	held := signals.Hold(sigs, append(ForwardedSignals, syscall.SIGWINCH)...)
	return Init(context.Background(), args, sigs, held)
}

// ExecMain is the main of a process started with ExecArg and the command
// after it: it returns only where the command could not be executed, with
// the status shells use (127 for a command not found, else 126).
func ExecMain(args []string) int {
	err := ExecDropped(args)
	fmt.Fprintln(os.Stderr, "postern:", err)
	if errors.Is(err, ErrCommandNotFound) {
		return 127
	}
	return 126
}
