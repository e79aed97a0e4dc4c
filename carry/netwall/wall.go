package netwall

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/postern-dev/postern/carry/internal/pid1"
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
	// NoNetwork gives the run a network namespace with only lo and nothing
	// else: no door, no DNS, no rules, no way out at all (postern run
	// --network none). Ports and AllTCP are ignored, and Listeners is empty.
	NoNetwork bool
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
	// Files says what the run may do with the host's files besides its
	// working directory (see Files).
	Files Files
	// PidsLimit bounds the processes and threads the run has at once; 0 is
	// DefaultPidsLimit.
	PidsLimit int
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
	Hide []string
	// InitDir is where the wall's init attached to this binary is kept as
	// an executable of its own, which starts in a fraction of the time
	// this binary takes (see internal/wallimage); it must be the caller's
	// own, out of the run's reach. "" (or a binary with none attached)
	// re-executes Self.
	InitDir string

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
	StepOverlay  = "overlay"  // the home's and git directories' private layers
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
	// ErrCommandNotFound is returned by ExecDropped when Command[0] is not
	// found in the run's PATH.
	ErrCommandNotFound = pid1.ErrNotFound
	// ErrUnsupported means this operating system has no network wall.
	ErrUnsupported = errors.New("network wall: only available on Linux")
)

// Files is what a run may do with the host's files. Inside the wall every
// filesystem of the host is read-only; /tmp, /run and /dev/shm are the run's
// own; the working directory (or the work tree around it) is written for
// real, but for a git directory's files that git obeys; the home reads as the
// real one while what the run writes there lands in a private layer,
// discarded at the end. Files adds to that.
type Files struct {
	// Writable are the places written for real besides the working
	// directory: "~/"-relative (the home of HOME in the run's environment) or
	// absolute. A place that does not exist yet, under the home, is copied
	// back at the end if the run made it; so is a file, which a program may
	// replace by renaming another over it.
	Writable []Place
	// DenyRead are patterns (path.Match in each element) of paths masked
	// inside the run (an empty read-only file or directory over each that
	// exists), but for those AllowRead also matches.
	DenyRead, AllowRead []Place
	// Protect are absolute paths never writable inside the run wherever they
	// lie, and masked: postern's records, the remote agent's directory. A
	// writable place may not contain one, nor the working directory lie in
	// one.
	Protect []string
	// Guard are absolute paths of postern's own that a run may work below
	// but never list as writable: the workspaces' cache and the runs'
	// copies. A writable place may not be one, lie in one or contain one;
	// the working directory may lie in one (a run's own copy).
	Guard []string
	// ReadOnly are absolute paths held read-only where they lie in a place
	// the run writes: the postern binary and the agents it installs.
	ReadOnly []string
	// KeepHome, if set, is a directory (made by the caller) into which what
	// the run wrote in its home's private layer is copied at its end.
	KeepHome string
}

// Place is a path given by a policy, and where: "policy.hcl:3:14" ("" for a
// default).
type Place struct {
	Path string
	Pos  string
}

// DefaultPidsLimit is the processes and threads a run has at once when its
// Spec does not say.
const DefaultPidsLimit = 4096

// PlaceError is a working directory, home or writable place the wall will not
// give a run, found before anything is spawned.
type PlaceError struct {
	What string // "working directory", "home", "writable entry \"~/x\""
	Path string // as resolved
	Pos  string // where the policy names it, for a writable entry
	Why  string
	Fix  string
}

func (e *PlaceError) Error() string {
	msg := fmt.Sprintf("network wall: %s %s: %s", e.What, termtext.Printable(e.Path), e.Why)
	if e.Pos != "" {
		msg = e.Pos + ": " + msg
	}
	if e.Fix != "" {
		msg += "; fix: " + e.Fix
	}
	return msg
}

// Ending is what became of a run's writes once it ended.
type Ending struct {
	// Discarded are writes that did not reach the host: files in a git
	// directory that git obeys, writable files changed on the host
	// meanwhile. Each is named once.
	Discarded []Discard `json:"discarded,omitempty"`
	// HomeWrites counts the files the run wrote in its home outside its
	// writable places, all discarded (or kept, see Kept); HomeSample names
	// some, the shallowest first.
	HomeWrites int      `json:"home_writes,omitempty"`
	HomeSample []string `json:"home_sample,omitempty"`
	// Kept is where the home's private layer was copied (Files.KeepHome).
	Kept string `json:"kept,omitempty"`
	// Problems are what went wrong bringing writes home.
	Problems []string `json:"problems,omitempty"`
}

// Discard is one write of the run that did not reach the host, and why.
type Discard struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

func (d Discard) String() string { return termtext.Printable(d.Path) + ": " + d.Why }
