package seatbelt

import (
	"context"
	"errors"
	"fmt"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door/policy"
)

// A Wall is a carry.Wall: dispatch supervises it as every other carry's.
var _ carry.Wall = (*Wall)(nil)

// Carrier raises the connect door (carry ConnectDoor). Its fields are what
// only this carry needs besides the carry.WallSpec.
type Carrier struct {
	Policy *policy.Policy
	// NeverWritable are postern's own places (see Spec.NeverWritable).
	NeverWritable []string
	// Launcher starts a command under a profile; nil is SandboxExec.
	Launcher []string
}

var _ carry.Carrier = (*Carrier)(nil)

// Carry is carry.ConnectDoor.
func (c *Carrier) Carry() carry.Carry { return carry.ConnectDoor }

// Raise prepares spec's command under the connect-door profile. A profile
// the sandbox refuses, when raised or when started, is a *carry.Refusal; a
// command not found is ErrCommandNotFound.
func (c *Carrier) Raise(ctx context.Context, spec carry.WallSpec) (carry.Wall, error) {
	if spec.Open || spec.NoNetwork {
		return nil, errors.New("connect door: only a run behind its door is raised under the seatbelt")
	}
	w, err := Raise(ctx, Spec{
		Run: spec.Run, Command: spec.Command, Dir: spec.Dir, Env: spec.Env, Policy: c.Policy,
		NeverWritable: c.NeverWritable,
		Stdin:         spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr,
		TTY:      spec.TTY,
		Launcher: c.Launcher,
		Logger:   spec.Logger,
	})
	var perr *ProfileError
	switch {
	case errors.As(err, &perr):
		return nil, refusal(spec, err)
	case errors.Is(err, ErrCommandNotFound):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("raise the seatbelt: %w", err)
	}
	return &carried{Wall: w, spec: spec}, nil
}

// carried is a Wall raised by the Carrier: a profile refused at Start is a
// *carry.Refusal too.
type carried struct {
	*Wall
	spec carry.WallSpec
}

func (c *carried) Start(ctx context.Context) error {
	err := c.Wall.Start(ctx)
	var perr *ProfileError
	if errors.As(err, &perr) {
		return refusal(c.spec, err)
	}
	return err
}

func refusal(spec carry.WallSpec, err error) *carry.Refusal {
	return &carry.Refusal{Lane: spec.Lane, Machine: spec.Machine,
		AtRunTime: fmt.Sprintf("the sandbox refused the run at run time (%v)", err),
		Fix:       "check that /usr/bin/sandbox-exec runs here ('sandbox-exec -p \"(version 1)(allow default)\" /usr/bin/true'); then run 'postern machine probe-confinement " + spec.Machine + "' again"}
}
