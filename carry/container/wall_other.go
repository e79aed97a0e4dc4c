//go:build !linux

package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/postern-dev/postern/door"
)

// InitArg is the hidden first argument under which postern runs as the harness.
const InitArg = "__container-init"

// ErrUnsupported means this operating system has no container bridge.
var ErrUnsupported = errors.New("container bridge: only available on Linux")

// Errors of Raise, as on Linux.
var (
	ErrNeedsRoot = errors.New("container bridge needs root")
	ErrNotStatic = errors.New("postern binary is not statically linked")
)

// Spec is one command to run in a container behind the wall.
type Spec struct {
	Engine                *Engine
	Image                 string
	Command               []string
	Run                   string
	Ports                 []uint16
	AllTCP                bool
	NoNetwork             bool
	Open                  bool
	TTY                   bool
	PidsLimit             int
	Env                   []string
	Stdin, Stdout, Stderr *os.File
	Self                  string
	Logger                *slog.Logger
}

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

// Init is the harness; it only runs inside a Linux container.
func Init(ctx context.Context, args []string, signals <-chan os.Signal, stderr io.Writer) int {
	fmt.Fprintln(stderr, "postern: container harness:", ErrUnsupported)
	return 125
}

// Sweep has nothing to remove here.
func Sweep(ctx context.Context, e *Engine) error { return nil }

func hardLimits() string    { return "" }
func kernelRelease() string { return "" }
