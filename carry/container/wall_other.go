//go:build !linux

package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/postern-dev/postern/door"
)

// InitArg is the hidden first argument under which postern runs as the harness.
const InitArg = "__container-init"

// ErrUnsupported means this operating system has no container bridge.
var ErrUnsupported = errors.New("container bridge: only available on Linux")

// Wall is never raised on this operating system.
type Wall struct{}

// Raise always fails here.
func Raise(ctx context.Context, spec Spec) (*Wall, error) { return nil, ErrUnsupported }

func (w *Wall) Listeners() door.Listeners       { return door.Listeners{} }
func (w *Wall) Name() string                    { return "" }
func (w *Wall) Pid() int                        { return 0 }
func (w *Wall) Start(ctx context.Context) error { return ErrUnsupported }
func (w *Wall) Signal(sig syscall.Signal) error { return ErrUnsupported }
func (w *Wall) Wait() (int, error)              { return -1, ErrUnsupported }
func (w *Wall) Close() error                    { return nil }

// NotStarted never reports a command here.
func (w *Wall) NotStarted() (code int, why string, ok bool) { return 0, "", false }

// Init is the harness; it only runs inside a Linux container.
func Init(ctx context.Context, args []string, signals <-chan os.Signal, stderr io.Writer) int {
	fmt.Fprintln(stderr, "postern: container harness:", ErrUnsupported)
	return 125
}

// Sweep has nothing to remove here.
func Sweep(ctx context.Context, e *Engine) error { return nil }

func hardLimits() string { return "" }
