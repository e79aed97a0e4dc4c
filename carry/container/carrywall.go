package container

import (
	"context"
	"errors"
	"fmt"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
)

// A Wall is a carry.Wall: dispatch supervises it as every other carry's.
var _ carry.Wall = (*Wall)(nil)

// Carrier raises a container (carry ContainerBridge): the network wall in
// its own network namespace, or, as carry.Choose asks for an open container
// or one with no network, no wall at all.
type Carrier struct {
	// Engine runs the container; nil is refused.
	Engine *Engine
	Image  string
	// Self is the harness to mount (see Spec.Self).
	Self string
}

var _ carry.Carrier = (*Carrier)(nil)

// Carry is carry.ContainerBridge.
func (c *Carrier) Carry() carry.Carry { return carry.ContainerBridge }

// Raise starts the container with spec's command inside, not yet started. A
// wall the kernel refuses in the container, or a user who may not raise one,
// is a *carry.Refusal.
func (c *Carrier) Raise(ctx context.Context, spec carry.WallSpec) (carry.Wall, error) {
	if c.Engine == nil {
		return nil, errors.New("container: no engine to run it")
	}
	w, err := Raise(ctx, Spec{
		Engine:    c.Engine,
		Image:     c.Image,
		Command:   spec.Command,
		Run:       spec.Run,
		Ports:     spec.Ports,
		AllTCP:    spec.AllTCP,
		NoNetwork: spec.NoNetwork,
		Open:      spec.Open,
		TTY:       spec.TTY,
		PidsLimit: spec.PidsLimit,
		Env:       spec.Env,
		Stdin:     spec.Stdin,
		Stdout:    spec.Stdout,
		Stderr:    spec.Stderr,
		Self:      c.Self,
		Logger:    spec.Logger,
	})
	if err != nil {
		var kerr *netwall.KernelError
		switch {
		case errors.As(err, &kerr):
			return nil, &carry.Refusal{Lane: spec.Lane, Machine: spec.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall in the container at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + spec.Machine + "' again"}
		case errors.Is(err, ErrNeedsRoot):
			return nil, &carry.Refusal{Lane: spec.Lane, Machine: spec.Machine, AtRunTime: err.Error(),
				Fix: "run postern as root (the user the machine was measured as), or use --container-network none"}
		}
		return nil, fmt.Errorf("start the container: %w", err)
	}
	return w, nil
}
