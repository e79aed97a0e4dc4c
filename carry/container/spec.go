package container

import (
	"errors"
	"log/slog"
	"os"

	"github.com/postern-dev/postern/carry"
)

// Spec is one command to run in a container behind the wall.
type Spec struct {
	Engine *Engine
	Image  string
	// Command is the argv, looked up in the image's PATH.
	Command []string
	// Run is the run's id, used in the container's name and label.
	Run string
	// Ports are the TCP ports redirected to the door's transparent listener.
	Ports []uint16
	// AllTCP redirects TCP to every port to the door instead (observe mode).
	AllTCP bool
	// NoNetwork leaves the container with no network at all and raises no wall:
	// Listeners is empty.
	NoNetwork bool
	// Open gives the container the engine's own network (its default bridge)
	// and raises no wall: the person asked for it with --egress-open.
	// Listeners is empty.
	Open bool
	// TTY gives the container a terminal (Stdin must be one).
	TTY bool
	// PidsLimit bounds the container's processes and threads (the engine's
	// --pids-limit); 0 leaves the engine's default.
	PidsLimit int
	// Env is added to the container's environment (NAME=VALUE).
	Env []string
	// Stdin, Stdout and Stderr are the command's streams; nil means none.
	Stdin, Stdout, Stderr *os.File
	// Self is postern's static binary, bind-mounted as the harness; "" is the
	// running executable.
	Self   string
	Logger *slog.Logger
}

// Errors of Raise and a Wall's methods.
var (
	ErrNotStarted     = carry.ErrNotStarted
	ErrAlreadyStarted = carry.ErrAlreadyStarted
	ErrClosed         = carry.ErrClosed
	// ErrNeedsRoot means the wall cannot be raised in a container's network
	// namespace by this user.
	ErrNeedsRoot = errors.New("container bridge needs root")
	// ErrNotStatic means the binary to mount as the harness would not run in an
	// image without its libraries.
	ErrNotStatic = errors.New("postern binary is not statically linked")
)
