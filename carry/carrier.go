package carry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/postern-dev/postern/machine"
)

// Carrier raises the wall of one carry around one command. The network wall
// (carry/netwall), the container bridge (carry/container) and the connect
// door (carry/seatbelt) each provide one; Choose picks among those its Spec
// offers, and dispatch raises every walled run through the one it returns.
type Carrier interface {
	// Carry names the wall the carrier raises, as the run's record keeps it.
	Carry() Carry
	// Raise raises the wall with the command inside, not yet started. A wall
	// the machine refuses at run time is a *Refusal.
	Raise(ctx context.Context, spec WallSpec) (Wall, error)
}

// WallSpec is what every carrier is told of the command it raises a wall
// around. What one carrier alone needs (the network wall's files, the
// container's image, the seatbelt's policy) is set on that carrier.
type WallSpec struct {
	Run     string // the run's id
	Machine string // for refusals
	Lane    machine.Lane
	// Command is the argv; Command[0] is looked up in PATH as the run sees it.
	Command []string
	// Dir is the working directory; "" keeps the caller's (or the image's).
	Dir string
	// Env is the command's environment (a container's: what is added to the
	// image's).
	Env []string
	// Ports are the TCP ports redirected to the door.
	Ports []uint16
	// AllTCP redirects TCP to every port to the door (observe mode).
	AllTCP bool
	// NoNetwork gives the command no network at all: no door, no DNS.
	NoNetwork bool
	// Open gives the command an open network and raises no wall (a
	// container on its engine's own network, by --egress-open).
	Open bool
	// Stdin, Stdout and Stderr are the command's streams; TTY says Stdin is
	// a terminal of the run's own.
	Stdin, Stdout, Stderr *os.File
	TTY                   bool
	// PidsLimit bounds the command's processes and threads; 0 is the
	// carrier's default.
	PidsLimit int
	Logger    *slog.Logger
}

// ErrNoWall is what the carrier of carry None returns from Raise: an open run
// has no wall to raise, and runs as a plain process.
var ErrNoWall = errors.New("carry none: an open run has no wall to raise")

// absent is the carrier Choose returns for a carry no carrier of its Spec
// implements: its Carry says what was chosen (a remote machine raises it
// itself), and raising it here is refused.
type absent struct {
	carry   Carry
	lane    machine.Lane
	machine string
}

func (a absent) Carry() Carry { return a.carry }

func (a absent) Raise(ctx context.Context, spec WallSpec) (Wall, error) {
	if a.carry == None {
		return nil, ErrNoWall
	}
	return nil, &Refusal{Lane: a.lane, Machine: a.machine,
		AtRunTime: fmt.Sprintf("carry %s is not available on this machine's platform", a.carry),
		Fix:       "run on a machine whose platform has it, or with --egress-open \"<reason>\" to open the network deliberately"}
}

// unwalled is a carrier raising its command with no wall: a container with
// no network, or on its engine's own. Its record says carry None.
type unwalled struct {
	inner Carrier
	open  bool
}

func (u unwalled) Carry() Carry { return None }

func (u unwalled) Raise(ctx context.Context, spec WallSpec) (Wall, error) {
	spec.Open, spec.NoNetwork = u.open, !u.open
	return u.inner.Raise(ctx, spec)
}

// carrier returns the carrier of c among cs, or an absent one.
func carrier(cs []Carrier, c Carry, spec Spec) Carrier {
	for _, k := range cs {
		if k != nil && k.Carry() == c {
			return k
		}
	}
	return absent{carry: c, lane: spec.Lane, machine: spec.Machine}
}
