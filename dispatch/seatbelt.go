package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/records"
)

// RunSeatbelt is RunWalled for the connect-door carry (macOS): the command
// runs under a seatbelt profile that lets it reach nothing but the door's
// proxy on loopback, with its environment pointing every common tool there,
// and the door beside it judges what it asks for. Streams, events, signals,
// the kill on ctx's end and the exit status are as RunWalled's. A profile
// macOS refuses is a *carry.Refusal.
func RunSeatbelt(ctx context.Context, w Walled) (int, error) {
	w.fillDefaults()
	stdin, stdout, stderr, tty, ownTTY, err := w.streams()
	if err != nil {
		return 0, err
	}
	if tty != nil {
		defer tty.close()
	}
	refusal := func(err error) error {
		return &carry.Refusal{Lane: w.Lane, Machine: w.Machine,
			AtRunTime: fmt.Sprintf("the sandbox refused the run at run time (%v)", err),
			Fix:       "check that /usr/bin/sandbox-exec runs here ('sandbox-exec -p \"(version 1)(allow default)\" /usr/bin/true'); then run 'postern machine probe-confinement " + w.Machine + "' again"}
	}
	wall, err := seatbelt.Raise(ctx, seatbelt.Spec{
		Run: w.Run, Command: w.Command, Dir: w.Dir, Env: withGuardrails(w.Env, w.Policy, false), Policy: w.Policy,
		NeverWritable: append(neverWritable(), w.NeverWritable...),
		Stdin:         stdin, Stdout: stdout, Stderr: stderr,
		TTY:    ownTTY || (tty != nil && tty.keys != nil),
		Logger: w.Logger,
	})
	var perr *seatbelt.ProfileError
	switch {
	case errors.Is(err, seatbelt.ErrCommandNotFound):
		fmt.Fprintf(stderr, "postern: %v\n", err)
		return 127, nil
	case errors.As(err, &perr):
		return 0, refusal(err)
	case err != nil:
		return 0, fmt.Errorf("raise the seatbelt: %w", err)
	}
	defer wall.Close()

	if w.BeforeStart != nil {
		if err := w.BeforeStart(); err != nil {
			return 0, err
		}
	}
	cfg := door.Config{Policy: w.Policy, Resolver: w.Resolver, AddHosts: w.Pins, Emit: w.Emit, Run: w.Run, Logger: w.Logger}
	e := withDoor(ctx, wall.Listeners(), cfg, func() (int, error) {
		return superviseWall(ctx, wall, tty, w.Signals, w.KillGrace, w.OnStart)
	})
	if errors.As(e.err, &perr) {
		e.err = refusal(perr)
	}
	if changes := wall.GuardChanges(); len(changes) > 0 {
		guarded := make([]string, len(changes))
		for i, c := range changes {
			w.Logger.Info("guarded path changed by the run", "run", w.Run, "path", c.Path, "what", c.What)
			guarded[i] = c.String()
		}
		tellWrites(w.Warn, w.Run, guarded)
		if w.OnWrites != nil {
			w.OnWrites(guarded)
		}
	}
	if e.err != nil {
		return e.code, e.err
	}
	e.tellTeardown(w.Logger, w.Warn, w.Run)
	return e.code, nil
}

// neverWritable are postern's own places on this machine: the directory of
// its records. (The running binary itself is guarded by the carry.)
func neverWritable() []string {
	if p, err := records.DefaultPath(); err == nil {
		return []string{filepath.Dir(p)}
	}
	return nil
}

// agentDir is the directory of the running agent: on a remote machine, the
// run may not change what the controller starts there next.
func agentDir() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	return []string{filepath.Dir(self)}
}
