package carry

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

var measured = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func recordWith(yes ...rung.Name) *rung.Record {
	rec := &rung.Record{Name: "m", Kernel: "6.1.0", MeasuredAt: measured, Rungs: map[rung.Name]rung.Rung{}}
	for _, name := range []rung.Name{rung.Userns, rung.Netns, rung.NetnsRedirect, rung.IPv6, rung.Landlock, rung.SeatbeltNetworkDeny, rung.Container, rung.Overlay} {
		rec.Rungs[name] = rung.Rung{Result: rung.No, Detail: string(name) + " refused", Remedy: "fix " + string(name)}
	}
	for _, name := range yes {
		rec.Rungs[name] = rung.Rung{Result: rung.Yes, Detail: "ok"}
	}
	return rec
}

func TestChooseEveryLane(t *testing.T) {
	lanes := []struct {
		lane  machine.Lane
		carry Carry
	}{
		{machine.LaneLocalLinux, NetworkWall},
		{machine.LaneRemoteLinux, NetworkWall},
		{machine.LaneLocalMacOS, ConnectDoor},
		{machine.LaneRemoteMacOS, ConnectDoor},
		{machine.LaneLocalContainer, ContainerBridge},
	}
	for _, tc := range lanes {
		need := Needs(tc.lane)
		if len(need) == 0 {
			t.Fatalf("lane %s needs no rung", tc.lane)
		}
		t.Run(string(tc.lane)+"/all", func(t *testing.T) {
			got, err := Choose(recordWith(need...), Spec{Machine: "m", Lane: tc.lane})
			if err != nil || got.Carry() != tc.carry {
				t.Fatalf("Choose = %v, %v; want %q", got, err, tc.carry)
			}
		})
		t.Run(string(tc.lane)+"/never-measured", func(t *testing.T) {
			_, err := Choose(nil, Spec{Machine: "m", Lane: tc.lane})
			var ref *Refusal
			if !errors.As(err, &ref) {
				t.Fatalf("err = %v, want *Refusal", err)
			}
			for _, want := range []string{RefusedMarker + ":", "lane " + string(tc.lane), `machine "m"`, "never measured", "postern machine probe-confinement m"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q lacks %q", err, want)
				}
			}
		})
		for i, missing := range need {
			rest := append(append([]rung.Name(nil), need[:i]...), need[i+1:]...)
			t.Run(string(tc.lane)+"/missing-"+string(missing), func(t *testing.T) {
				_, err := Choose(recordWith(rest...), Spec{Machine: "m", Lane: tc.lane})
				var ref *Refusal
				if !errors.As(err, &ref) {
					t.Fatalf("err = %v, want *Refusal", err)
				}
				if len(ref.Missing) != 1 || ref.Missing[0].Rung != missing {
					t.Fatalf("missing = %+v, want only %s", ref.Missing, missing)
				}
				for _, want := range []string{RefusedMarker, string(missing) + ": no (" + string(missing) + " refused)", "remedy: fix " + string(missing), "2026-11-01T12:00:00Z", "--egress-open"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q lacks %q", err, want)
					}
				}
			})
		}
	}
}

func TestChooseRungAbsentFromRecord(t *testing.T) {
	rec := &rung.Record{Name: "m", MeasuredAt: measured, Rungs: map[rung.Name]rung.Rung{}}
	_, err := Choose(rec, Spec{Machine: "m", Lane: machine.LaneLocalLinux})
	if err == nil || !strings.Contains(err.Error(), "netns: no (not measured)") {
		t.Fatalf("err = %v", err)
	}
}

func TestChooseEgressOpen(t *testing.T) {
	got, err := Choose(nil, Spec{Machine: "m", Lane: machine.LaneLocalLinux, EgressOpen: "installing a toolchain"})
	if err != nil || got.Carry() != None {
		t.Fatalf("Choose = %v, %v; want none", got, err)
	}
	// A blank reason is not a reason.
	if _, err := Choose(nil, Spec{Machine: "m", Lane: machine.LaneLocalLinux, EgressOpen: "  "}); err == nil {
		t.Fatal("a blank --egress-open reason opened the network")
	}
}

func TestChooseStaleKernel(t *testing.T) {
	_, err := Choose(recordWith(rung.Netns), Spec{Machine: "m", Lane: machine.LaneLocalLinux, Kernel: "6.9.0"})
	if err == nil || !strings.Contains(err.Error(), "kernel 6.1.0") {
		t.Fatalf("err = %v, want a refusal naming the measured kernel", err)
	}
	if _, err := Choose(recordWith(rung.Netns, rung.Overlay), Spec{Machine: "m", Lane: machine.LaneLocalLinux, Kernel: "6.1.0"}); err != nil {
		t.Fatalf("same kernel refused: %v", err)
	}
}

func TestChooseUnknownLane(t *testing.T) {
	if _, err := Choose(recordWith(rung.Netns), Spec{Machine: "m", Lane: "moon"}); err == nil {
		t.Fatal("an unknown lane was not refused")
	}
}
