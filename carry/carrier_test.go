package carry

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// fakeCarrier records the spec it was asked to raise.
type fakeCarrier struct {
	carry Carry
	got   *WallSpec
}

func (f *fakeCarrier) Carry() Carry { return f.carry }

func (f *fakeCarrier) Raise(ctx context.Context, spec WallSpec) (Wall, error) {
	*f.got = spec
	return fakeWall{}, nil
}

type fakeWall struct{}

func (fakeWall) Start(context.Context) error { return nil }
func (fakeWall) Signal(syscall.Signal) error { return nil }
func (fakeWall) Wait() (int, error)          { return 0, nil }
func (fakeWall) Close() error                { return nil }

func TestChooseReturnsTheOfferedCarrier(t *testing.T) {
	var got WallSpec
	nw := &fakeCarrier{carry: NetworkWall, got: &got}
	ct := &fakeCarrier{carry: ContainerBridge, got: &got}
	offered := []Carrier{ct, nw}
	c, err := Choose(recordWith(Needs(machine.LaneLocalLinux)...), Spec{Machine: "m", Lane: machine.LaneLocalLinux, Carriers: offered})
	if err != nil || c != Carrier(nw) {
		t.Fatalf("Choose = %v, %v; want the network wall's carrier", c, err)
	}
	c, err = Choose(recordWith(Needs(machine.LaneLocalContainer)...), Spec{Machine: "m", Lane: machine.LaneLocalContainer, Carriers: offered})
	if err != nil || c != Carrier(ct) {
		t.Fatalf("Choose = %v, %v; want the container's carrier", c, err)
	}
}

func TestChooseAbsentCarrierRefusesToRaise(t *testing.T) {
	c, err := Choose(recordWith(Needs(machine.LaneLocalMacOS)...), Spec{Machine: "m", Lane: machine.LaneLocalMacOS})
	if err != nil || c.Carry() != ConnectDoor {
		t.Fatalf("Choose = %v, %v; want connect-door", c, err)
	}
	w, err := c.Raise(context.Background(), WallSpec{Command: []string{"true"}})
	var ref *Refusal
	if w != nil || !errors.As(err, &ref) || !strings.Contains(err.Error(), "connect-door is not available") {
		t.Fatalf("Raise = %v, %v; want a refusal naming connect-door", w, err)
	}
	open, err := Choose(nil, Spec{Machine: "m", Lane: machine.LaneLocalLinux, EgressOpen: "reason"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Raise(context.Background(), WallSpec{}); !errors.Is(err, ErrNoWall) {
		t.Fatalf("Raise of carry none = %v, want ErrNoWall", err)
	}
}

// A container with no network or an open one is raised by the container's
// carrier without a wall and without a measurement; recorded as carry none.
func TestChooseUnwalledContainer(t *testing.T) {
	for _, tc := range []struct {
		name            string
		spec            Spec
		open, noNetwork bool
	}{
		{"open", Spec{EgressOpen: "pulling images"}, true, false},
		{"no-network", Spec{NoNetwork: true}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got WallSpec
			ct := &fakeCarrier{carry: ContainerBridge, got: &got}
			tc.spec.Machine, tc.spec.Lane, tc.spec.Carriers = "local", machine.LaneLocalContainer, []Carrier{ct}
			c, err := Choose(nil, tc.spec)
			if err != nil || c.Carry() != None {
				t.Fatalf("Choose = %v, %v; want carry none", c, err)
			}
			if _, err := c.Raise(context.Background(), WallSpec{Command: []string{"sh"}}); err != nil {
				t.Fatal(err)
			}
			if got.Open != tc.open || got.NoNetwork != tc.noNetwork || got.Command[0] != "sh" {
				t.Fatalf("raised with %+v; want open=%v no-network=%v", got, tc.open, tc.noNetwork)
			}
		})
	}
	// Walled, the container lane still needs its measurement.
	if _, err := Choose(recordWith(rung.Container), Spec{Machine: "local", Lane: machine.LaneLocalContainer}); err == nil {
		t.Fatal("a container bridge was chosen without net-redirect measured")
	}
}
