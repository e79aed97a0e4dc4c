//go:build !postern_wallinit

package netwall

import (
	"context"
	"errors"
	"fmt"

	"github.com/postern-dev/postern/carry"
)

// A Wall is a carry.Wall: dispatch supervises it as every other carry's.
var _ carry.Wall = (*Wall)(nil)

// Carrier raises the network wall (carry NetworkWall). Its fields are what
// only this wall needs besides the carry.WallSpec.
type Carrier struct {
	// Files is what the run may do with the host's files.
	Files Files
	// TrustPEM is one more authority the run trusts (see Spec.TrustPEM).
	TrustPEM []byte
	// Hide are files the run may not read (see Spec.Hide).
	Hide []string
	// InitDir is where the wall's init is kept (see Spec.InitDir).
	InitDir string
}

var _ carry.Carrier = (*Carrier)(nil)

// Carry is carry.NetworkWall.
func (c *Carrier) Carry() carry.Carry { return carry.NetworkWall }

// Raise raises the network wall around spec's command. A step the kernel
// refuses is a *carry.Refusal that names the step and its remedy; a place
// the run may not have is a *PlaceError.
func (c *Carrier) Raise(ctx context.Context, spec carry.WallSpec) (carry.Wall, error) {
	if spec.Open {
		return nil, errors.New("network wall: an open run has no wall to raise")
	}
	w, err := Raise(ctx, Spec{
		Command:   spec.Command,
		Dir:       spec.Dir,
		Env:       spec.Env,
		TrustPEM:  c.TrustPEM,
		Hide:      c.Hide,
		Ports:     spec.Ports,
		AllTCP:    spec.AllTCP,
		NoNetwork: spec.NoNetwork,
		Stdin:     spec.Stdin,
		Stdout:    spec.Stdout,
		Stderr:    spec.Stderr,
		TTY:       spec.TTY,
		Files:     c.Files,
		PidsLimit: spec.PidsLimit,
		InitDir:   c.InitDir,
		Logger:    spec.Logger,
	})
	if err != nil {
		var kerr *KernelError
		if errors.As(err, &kerr) {
			return nil, &carry.Refusal{Lane: spec.Lane, Machine: spec.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + spec.Machine + "' again"}
		}
		return nil, fmt.Errorf("raise the network wall: %w", err)
	}
	return w, nil
}

// Errors a Wall's methods return.
var (
	ErrNotStarted     = carry.ErrNotStarted
	ErrAlreadyStarted = carry.ErrAlreadyStarted
	ErrClosed         = carry.ErrClosed
)
