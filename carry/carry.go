package carry

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// Carry names the wall a lane gets.
type Carry string

const (
	// NetworkWall is the Linux network wall: own namespaces, nftables into the door.
	NetworkWall Carry = "network-wall"
	// ConnectDoor is the macOS seatbelt profile that denies all network but the door.
	ConnectDoor Carry = "connect-door"
	// ContainerBridge is the network wall inside a container's own namespace.
	ContainerBridge Carry = "container-bridge"
	// None is no wall at all: only by an explicit, recorded --egress-open.
	None Carry = "none"
)

// RefusedMarker starts every refusal so that people and scripts can find it.
const RefusedMarker = "EGRESS-CLOSED-DEFAULT-REFUSED"

// Spec is what Choose needs to know about the run.
type Spec struct {
	Machine string
	Lane    machine.Lane
	// EgressOpen is the person's reason for running without a wall; non-empty opens
	// the run's network, and the reason is recorded.
	EgressOpen string
	// Kernel is the kernel release the run would meet now, if known. A record
	// measured on another kernel no longer says what this one can do.
	Kernel string
	// NoNetwork is a run with no network at all (--network none): on a Linux
	// lane it needs the network namespace and the filesystem's rungs, not
	// the redirect into the door or Landlock's network rules.
	NoNetwork bool
	// Carriers are the carriers this binary has; Choose returns the one of
	// the carry it chooses. A carry none of them raises comes back as a
	// Carrier that names it and refuses to raise it here (a remote
	// machine's agent raises its own).
	Carriers []Carrier
}

// noNetworkDrops are the rungs a run with no network does not stand on.
var noNetworkDrops = []rung.Name{rung.NetnsRedirect, rung.Landlock}

// needs lists the rungs each lane's carry stands on.
var needs = map[machine.Lane]struct {
	carry Carry
	rungs []rung.Name
}{
	machine.LaneLocalLinux:     {NetworkWall, []rung.Name{rung.Netns, rung.Overlay}},
	machine.LaneRemoteLinux:    {NetworkWall, []rung.Name{rung.Netns, rung.NetnsRedirect, rung.Landlock, rung.Overlay}},
	machine.LaneLocalMacOS:     {ConnectDoor, []rung.Name{rung.SeatbeltNetworkDeny}},
	machine.LaneRemoteMacOS:    {ConnectDoor, []rung.Name{rung.SeatbeltNetworkDeny}},
	machine.LaneLocalContainer: {ContainerBridge, []rung.Name{rung.NetnsRedirect, rung.Container}},
}

// Needs returns the rungs a lane needs, for messages and docs.
func Needs(lane machine.Lane) []rung.Name { return append([]rung.Name(nil), needs[lane].rungs...) }

// Refusal says why a run cannot be walled. No process is spawned for a refused run.
type Refusal struct {
	Lane       machine.Lane
	Machine    string
	MeasuredAt time.Time // zero: never measured
	Kernel     string    // the kernel the record was measured on, when it no longer matches
	// AtRunTime is set when the measurement said yes but the machine refused the
	// wall when the run was being raised.
	AtRunTime string
	Needs     []rung.Name
	// Missing are the needed rungs that were not measured yes, each with what the
	// measurement said and its remedy.
	Missing []MissingRung
	Fix     string
}

// MissingRung is one needed rung and what was measured of it.
type MissingRung struct {
	Rung   rung.Name
	Detail string
	Remedy string
}

func (r *Refusal) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: lane %s on machine %q: ", RefusedMarker, r.Lane, r.Machine)
	switch {
	case r.AtRunTime != "":
		if !r.MeasuredAt.IsZero() {
			fmt.Fprintf(&b, "measured %s, but ", r.MeasuredAt.UTC().Format(time.RFC3339))
		}
		b.WriteString(r.AtRunTime)
	case r.MeasuredAt.IsZero():
		b.WriteString("never measured")
	case r.Kernel != "":
		fmt.Fprintf(&b, "measured %s on kernel %s, which is no longer running", r.MeasuredAt.UTC().Format(time.RFC3339), r.Kernel)
	default:
		fmt.Fprintf(&b, "measured %s", r.MeasuredAt.UTC().Format(time.RFC3339))
		for _, m := range r.Missing {
			fmt.Fprintf(&b, "; %s: no (%s)", m.Rung, m.Detail)
			if m.Remedy != "" {
				fmt.Fprintf(&b, " remedy: %s", m.Remedy)
			}
		}
	}
	if len(r.Needs) > 0 {
		fmt.Fprintf(&b, "; the lane needs %s", joinNames(r.Needs))
	}
	fmt.Fprintf(&b, "; nothing was started; fix: %s", r.Fix)
	return b.String()
}

// Choose returns the carrier for a run, or a *Refusal when what was measured
// about the machine cannot wall it. rec is nil for a machine never measured. A
// container with an open network or none at all needs no wall, and so no
// measurement: the container's carrier raises it unwalled, as carry None.
// Choose is pure: it performs nothing and reads only its arguments.
func Choose(rec *rung.Record, spec Spec) (Carrier, error) {
	open := strings.TrimSpace(spec.EgressOpen) != ""
	if spec.Lane == machine.LaneLocalContainer && (open || spec.NoNetwork) {
		return unwalled{inner: carrier(spec.Carriers, ContainerBridge, spec), open: open}, nil
	}
	if open {
		return carrier(spec.Carriers, None, spec), nil
	}
	c, err := choose(rec, spec)
	if err != nil {
		return nil, err
	}
	return carrier(spec.Carriers, c, spec), nil
}

func choose(rec *rung.Record, spec Spec) (Carry, error) {
	probeCmd := fmt.Sprintf("run 'postern machine probe-confinement %s'", spec.Machine)
	lane, ok := needs[spec.Lane]
	if ok && spec.NoNetwork && lane.carry == NetworkWall {
		lane.rungs = slices.DeleteFunc(slices.Clone(lane.rungs), func(r rung.Name) bool { return slices.Contains(noNetworkDrops, r) })
	}
	if !ok {
		return "", &Refusal{Lane: spec.Lane, Machine: spec.Machine, Fix: "no carry walls this lane; run with --egress-open \"<reason>\" to open the network deliberately"}
	}
	ref := &Refusal{Lane: spec.Lane, Machine: spec.Machine, Needs: lane.rungs, Fix: probeCmd + " to measure it"}
	if rec == nil || rec.MeasuredAt.IsZero() {
		return "", ref
	}
	ref.MeasuredAt = rec.MeasuredAt
	if spec.Kernel != "" && rec.Kernel != "" && spec.Kernel != rec.Kernel {
		ref.Kernel = rec.Kernel
		ref.Fix = probeCmd + " again to measure the running kernel"
		return "", ref
	}
	for _, name := range lane.rungs {
		if rec.Has(name) {
			continue
		}
		g, measured := rec.Rungs[name]
		m := MissingRung{Rung: name, Detail: "not measured", Remedy: g.Remedy}
		if measured {
			m.Detail = g.Detail
		}
		ref.Missing = append(ref.Missing, m)
	}
	if len(ref.Missing) == 0 {
		return lane.carry, nil
	}
	ref.Fix = "apply the remedies above, then " + probeCmd + " again; or run with --egress-open \"<reason>\" to open the network deliberately"
	return "", ref
}

func joinNames(names []rung.Name) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
