package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
)

// recordingCarrier raises exitWalls and keeps the spec it was asked for.
type recordingCarrier struct {
	carry carry.Carry
	wall  *exitWall
	err   error
	got   carry.WallSpec
}

func (f *recordingCarrier) Carry() carry.Carry { return f.carry }

func (f *recordingCarrier) Raise(ctx context.Context, spec carry.WallSpec) (carry.Wall, error) {
	f.got = spec
	if f.err != nil {
		return nil, f.err
	}
	return f.wall, nil
}

// exitWall is a command that exits with code at once; notRun, when set, is
// what a container harness says of a command it could not start.
type exitWall struct {
	code            int
	notRun          string
	started, closed bool
}

func (w *exitWall) Start(context.Context) error { w.started = true; return nil }
func (w *exitWall) Signal(syscall.Signal) error { return nil }
func (w *exitWall) Wait() (int, error)          { return w.code, nil }
func (w *exitWall) Close() error                { w.closed = true; return nil }
func (w *exitWall) NotStarted() (int, string, bool) {
	return w.code, w.notRun, w.notRun != ""
}

// The one path runs any carrier's wall: it starts the command, returns its
// status and closes the wall; the carrier is told the run it raises.
func TestRunWalledAnyCarrier(t *testing.T) {
	wall := &exitWall{code: 3}
	c := &recordingCarrier{carry: carry.ContainerBridge, wall: wall}
	started := false
	code, err := RunWalled(context.Background(), Walled{Carrier: c, InContainer: true, NoNetwork: true,
		Run: "r1", Machine: "local", Lane: machine.LaneLocalContainer, Command: []string{"make", "test"}, Env: []string{"A=1"},
		OnStart: func() { started = true }})
	if err != nil || code != 3 {
		t.Fatalf("RunWalled = %d, %v; want 3, nil", code, err)
	}
	if !wall.started || !wall.closed || !started {
		t.Fatalf("wall started %v, closed %v, OnStart told %v; want all", wall.started, wall.closed, started)
	}
	if c.got.Run != "r1" || c.got.Machine != "local" || !slices.Equal(c.got.Command, []string{"make", "test"}) || !c.got.NoNetwork || !slices.Contains(c.got.Env, "A=1") {
		t.Fatalf("carrier was asked for %+v", c.got)
	}
}

// A container's harness that could not start the command makes 126/127 a
// CommandError, as a local command not found is; a command that exits 127
// by itself stays an exit status.
func TestRunWalledContainerNotRun(t *testing.T) {
	for _, tc := range []struct {
		code     int
		notRun   string
		notFound bool
		isErr    bool
	}{
		{127, "exec: \"nope\": not found", true, true},
		{126, "permission denied", false, true},
		{127, "", false, false},
	} {
		c := &recordingCarrier{carry: carry.ContainerBridge, wall: &exitWall{code: tc.code, notRun: tc.notRun}}
		code, err := RunWalled(context.Background(), Walled{Carrier: c, InContainer: true, NoNetwork: true, Command: []string{"nope"}})
		var cerr *CommandError
		if got := errors.As(err, &cerr); got != tc.isErr || code != tc.code {
			t.Fatalf("%d %q: RunWalled = %d, %v; want a CommandError: %v", tc.code, tc.notRun, code, err, tc.isErr)
		}
		if tc.isErr && (cerr.NotFound != tc.notFound || !strings.Contains(err.Error(), "in the container")) {
			t.Fatalf("%d: %v (not found %v)", tc.code, err, cerr.NotFound)
		}
	}
}

// A refusal the carrier makes when raising reaches the caller as one, and
// nothing is started.
func TestRunWalledRefusalPassesThrough(t *testing.T) {
	ref := &carry.Refusal{Lane: machine.LaneLocalLinux, Machine: "local", AtRunTime: "the kernel refused the wall", Fix: "fix it"}
	c := &recordingCarrier{carry: carry.NetworkWall, err: ref}
	_, err := RunWalled(context.Background(), Walled{Carrier: c, NoNetwork: true, Command: []string{"true"}})
	var got *carry.Refusal
	if !errors.As(err, &got) || got != ref {
		t.Fatalf("RunWalled = %v; want the carrier's refusal", err)
	}
}
