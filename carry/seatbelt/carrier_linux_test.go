package seatbelt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

// The carrier turns a profile the sandbox refuses, when raised or when
// started, into a refusal that names the lane, the machine and the fix, and
// leaves a command not found as ErrCommandNotFound.
func TestCarrierRefusals(t *testing.T) {
	spec := carry.WallSpec{Run: "r1", Machine: "mac1", Lane: machine.LaneRemoteMacOS, Command: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}}
	c := &Carrier{Policy: policy.Nothing(), Launcher: []string{"/bin/sh", "-c", `echo "sandbox-exec: syntax error" >&2; exit 65`, "sandbox-exec"}}
	w, err := c.Raise(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Start(context.Background())
	var ref *carry.Refusal
	if !errors.As(err, &ref) || ref.Lane != machine.LaneRemoteMacOS || ref.Machine != "mac1" ||
		!strings.Contains(err.Error(), "exit status 65") || !strings.Contains(err.Error(), "probe-confinement mac1") {
		t.Fatalf("Start = %v; want a refusal with the launcher's status and the probe to run", err)
	}
	if _, ok := w.(interface{ GuardChanges() []GuardChange }); !ok {
		t.Fatal("the carried wall does not report its guard changes")
	}

	c.Launcher = []string{"/no/sandbox-exec"}
	if _, err := c.Raise(context.Background(), spec); !errors.As(err, &ref) || !strings.Contains(err.Error(), "ships with macOS") {
		t.Fatalf("no launcher: %v; want a refusal", err)
	}
	c.Launcher = standIn("/dev/null")
	spec.Command = []string{"no-such-command-xyz"}
	if _, err := c.Raise(context.Background(), spec); !errors.Is(err, ErrCommandNotFound) {
		t.Fatalf("missing command: %v", err)
	}
	if _, err := c.Raise(context.Background(), carry.WallSpec{Command: []string{"true"}, NoNetwork: true}); err == nil {
		t.Fatal("the connect door raised a run with no network")
	}
}
