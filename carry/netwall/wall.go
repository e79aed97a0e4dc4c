package netwall

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/postern-dev/postern/internal/termtext"
)

// Hidden first arguments under which the postern binary (or a test binary, see
// Self) runs the wall's own processes. They are not for people.
const (
	// InitArg starts the wall's init: pid 1 of the run's namespaces.
	InitArg = "__wall-init"
	// ExecArg starts the last stage: drop every privilege, then exec the command.
	ExecArg = "__wall-exec"
)

// Self is the binary Raise re-executes with InitArg. Its main must hand that
// argument to Init (cmd/postern does; a test binary does it from TestMain).
var Self = "/proc/self/exe"

// Spec is one command to run behind the wall.
type Spec struct {
	// Command is the argv; Command[0] is looked up in PATH as the run sees it.
	Command []string
	// Dir is the working directory; "" keeps the caller's. It stays visible
	// inside the run even when it lies under the run's private /tmp or /run.
	Dir string
	// Env is the command's environment; nil means the caller's. HOME stays
	// visible like Dir.
	Env []string
	// Ports are the TCP ports redirected to the door's transparent listener.
	Ports []uint16
	// AllTCP redirects TCP to every port to the door instead (observe mode:
	// the door lets them through and records what enforce would refuse).
	AllTCP bool
	// Stdin, Stdout and Stderr are given to the command as they are; nil means
	// /dev/null.
	Stdin, Stdout, Stderr *os.File
	// TTY says Stdin is a terminal (a pty slave). The command gets a terminal
	// of the run's own instead, in a new session, with its modes and size
	// (kept in step on resize), and the init relays between the two: keys
	// such as Ctrl-C act inside the run. Without TTY the command has no
	// controlling terminal.
	TTY bool
	// TrustPEM, if set, is one more certificate authority (PEM) the run
	// trusts: the door's, for the hosts it inspects. Inside the run the
	// system bundle's paths (Debian, RHEL, Alpine) read as that bundle with
	// the authority appended, and SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
	// CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT, NODE_EXTRA_CA_CERTS and
	// Java's trust store options (JAVA_TOOL_OPTIONS) name the run's copies.
	// Nothing outside the run changes.
	TrustPEM []byte
	// Hide are files the run may not read (where postern reads injected
	// header values from): inside the run each is an empty file no one may
	// open.
	Hide   []string
	Logger *slog.Logger
}

// Kernel steps a wall is raised in; KernelError.Step is one of them.
const (
	StepUserns   = "userns"   // create the user, network, pid and mount namespaces
	StepLoopback = "loopback" // bring lo up
	StepRoute    = "route"    // default routes via lo
	StepListen   = "listen"   // the door's listeners inside the namespace
	StepNftables = "nftables" // the wall's nftables table
	StepMount    = "mount"    // private /tmp, /run, /dev/shm, /dev/pts and a fresh /proc
)

// KernelError is a step of raising the wall that the kernel refused, with what
// would make it work.
type KernelError struct {
	Step   string
	Err    error
	Remedy string
}

func (e *KernelError) Error() string {
	msg := fmt.Sprintf("network wall: kernel refused step %q: %v", e.Step, e.Err)
	if e.Remedy != "" {
		msg += "; fix: " + e.Remedy
	}
	return msg
}

func (e *KernelError) Unwrap() error { return e.Err }

// Errors a Wall's methods return.
var (
	ErrNotStarted     = errors.New("network wall: the command was not started")
	ErrAlreadyStarted = errors.New("network wall: the command was already started")
	ErrClosed         = errors.New("network wall: closed")
	// ErrCommandNotFound is returned by ExecDropped when Command[0] is not
	// found in the run's PATH.
	ErrCommandNotFound = errors.New("command not found")
	// ErrUnsupported means this operating system has no network wall.
	ErrUnsupported = errors.New("network wall: only available on Linux")
)

// GuardChange is a file that programs outside the wall obey, which the run
// made, replaced or changed although the wall could not hold it read-only.
type GuardChange struct {
	Path string
	// What happened to it, as the end of a sentence about Path: "appeared
	// during the run", "was a link to T and the run replaced it", "changed
	// during the run".
	What string
}

func (c GuardChange) String() string { return termtext.Printable(c.Path) + " " + c.What }
