package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/container"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
)

// Container asks for a run inside a local container (lane local-container).
type Container struct {
	Image string // "" is no container
	// Engine is container.Podman or container.Docker; "" takes the first that
	// answers.
	Engine string
	// Network is "" for the container bridge (the wall inside the container's
	// own network namespace, the door on the host), or ContainerNetworkNone for
	// a container with no network at all.
	Network string
}

// ContainerNetworkNone is a container run with no network at all: no wall is
// needed, and none is raised.
const ContainerNetworkNone = "none"

// whyNoNetwork is recorded for a container run with no network.
const whyNoNetwork = "container network none: no network at all"

// runContainerLane takes a run for lane local-container from its carry to its
// final record.
func runContainerLane(ctx context.Context, store *records.Store, spec Spec, m machine.Machine, rec *probe.Record,
	run *records.Run, pol *policy.Policy, pins map[string][]netip.Addr) (*records.Run, error) {
	run.Lane = machine.LaneLocalContainer
	cs := spec.Container
	switch cs.Network {
	case "", ContainerNetworkNone:
	default:
		return nil, fmt.Errorf("container network %q: use %q for a container with no network, or leave it out for the wall", cs.Network, ContainerNetworkNone)
	}
	if !m.IsLocal() {
		return refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: "containers run only on the local machine", Fix: "drop --machine, or drop --container"})
	}
	open := strings.TrimSpace(spec.EgressOpen) != ""
	noNetwork := cs.Network == ContainerNetworkNone
	switch {
	case open && noNetwork:
		return nil, errors.New("--egress-open and --container-network none contradict each other: leave out one of them")
	case open:
		// As a local open run: no measurement needed, the reason recorded.
		run.Carry = string(carry.None)
		run.Network = "open"
		run.Seal = sealOf(ctx, pol, sealNotOpen)
	case noNetwork:
		run.Carry = string(carry.None)
		run.Why = whyNoNetwork
		run.Network = NetworkNone
		run.Seal = sealOf(ctx, pol, sealNotNetwork)
	default:
		c, err := carry.Choose(rec, carry.Spec{Machine: m.Name, Lane: run.Lane, Kernel: kernelRelease()})
		if err != nil {
			return refuse(store, run, err)
		}
		run.Carry = string(c)
		run.Seal = sealOf(ctx, pol, sealNotContainer)
	}
	warnSeal(spec.Warn, run.ID, run.Seal)
	eng, err := container.DetectRemembered(ctx, cs.Engine)
	if err != nil {
		if noNetwork || open {
			run.State = records.StateRunning
			return finish(ctx, store, run, 0, err)
		}
		return refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: fmt.Sprintf("no container engine can run it now (%v)", err),
			Fix:       "install podman and runc, or start the docker daemon; then run 'postern machine probe-confinement' again"})
	}
	run.State = records.StateRunning
	if err := store.PutRun(run); err != nil {
		return nil, err
	}
	started(spec, run)
	if open {
		warnOpen(spec.Warn, run, "the container engine's own, no wall, no door")
	}
	code, err := runInContainer(ctx, store, run, spec, pol, pins, eng, noNetwork, open)
	return finish(ctx, store, run, code, err)
}

// containerNotRun is a command the container's harness could not start at
// all, as a *CommandError; otherwise the run's status and error as they are.
func containerNotRun(wall *container.Wall, command string, code int, err error) (int, error) {
	if err != nil {
		return code, err
	}
	if c, why, ok := wall.NotStarted(); ok && c == code && (c == 126 || c == 127) {
		return code, &CommandError{Command: command, NotFound: c == 127, Detail: termtext.Printable(why) + ", in the container"}
	}
	return code, nil
}

// pidsLimit is --pids-limit, else the policy's pids_limit.
func pidsLimit(spec Spec, pol *policy.Policy) int {
	if spec.PidsLimit > 0 {
		return spec.PidsLimit
	}
	return pol.PidsLimit
}

// runInContainer starts the container, raises the wall in its network namespace
// (unless it has no network), serves the door on the host and supervises the
// command as a local walled run is supervised.
func runInContainer(ctx context.Context, store *records.Store, run *records.Run, spec Spec, pol *policy.Policy,
	pins map[string][]netip.Addr, eng *container.Engine, noNetwork, open bool) (int, error) {
	// With a terminal the engine's client gives the container a terminal of its
	// own and keeps its size; the person's terminal is never the run's.
	tty := isTerminal(spec.Stdin)
	var env []string
	if tty {
		for _, kv := range spec.Env {
			if strings.HasPrefix(kv, "TERM=") {
				env = append(env, kv)
			}
		}
	}
	env = append(env, spec.PassEnv...)
	if !noNetwork {
		// Pointed at its guardrails (through the door, or straight to them
		// on an open network), not forced through them.
		env = append(env, guardrailEnv(pol, open)...)
	}
	wall, err := container.Raise(ctx, container.Spec{
		Engine:    eng,
		Image:     spec.Container.Image,
		Command:   spec.Command,
		Run:       run.ID,
		Ports:     wallPorts(pol),
		AllTCP:    pol.Mode == policy.Observe,
		NoNetwork: noNetwork,
		Open:      open,
		TTY:       tty,
		PidsLimit: pidsLimit(spec, pol),
		Env:       env,
		Stdin:     spec.Stdin,
		Stdout:    spec.Stdout,
		Stderr:    spec.Stderr,
		Logger:    spec.Logger,
	})
	if err != nil {
		var kerr *netwall.KernelError
		switch {
		case errors.As(err, &kerr):
			return 0, &carry.Refusal{Lane: run.Lane, Machine: run.Machine,
				AtRunTime: fmt.Sprintf("the kernel refused the wall in the container at run time (%s: %v)", kerr.Step, kerr.Err),
				Fix:       kerr.Remedy + "; then run 'postern machine probe-confinement " + run.Machine + "' again"}
		case errors.Is(err, container.ErrNeedsRoot):
			return 0, &carry.Refusal{Lane: run.Lane, Machine: run.Machine, AtRunTime: err.Error(),
				Fix: "run postern as root (the user the machine was measured as), or use --container-network none"}
		}
		return 0, fmt.Errorf("start the container: %w", err)
	}
	defer wall.Close()
	if noNetwork || open {
		code, err := superviseWall(ctx, wall, nil, spec.Signals, killGrace, nil)
		return containerNotRun(wall, spec.Command[0], code, err)
	}

	evlog := newEventLog(store, run, spec)
	cfg := door.Config{Policy: pol, Resolver: spec.Resolver, AddHosts: pins, Emit: evlog.Emit, Run: run.ID, Logger: spec.Logger}
	e := withDoor(ctx, wall.Listeners(), cfg, func() (int, error) {
		code, err := superviseWall(ctx, wall, nil, spec.Signals, killGrace, nil)
		return containerNotRun(wall, spec.Command[0], code, err)
	})
	logErr := closeEventLog(ctx, evlog, run)
	if e.err != nil {
		return e.code, e.err
	}
	e.teardown = errors.Join(e.teardown, logErr)
	e.tellTeardown(spec.Logger, spec.Warn, run.ID)
	return e.code, nil
}
