package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/container"
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

// checkContainer is what is asked of a container run before its carry is
// chosen: a network value it knows, one network, on this machine.
func checkContainer(store *records.Store, spec Spec, m machine.Machine, rec *probe.Record, run *records.Run) (refused bool, err error) {
	cs := spec.Container
	switch cs.Network {
	case "", ContainerNetworkNone:
	default:
		return false, fmt.Errorf("container network %q: use %q for a container with no network, or leave it out for the wall", cs.Network, ContainerNetworkNone)
	}
	if !m.IsLocal() {
		_, err := refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: "containers run only on the local machine", Fix: "drop --machine, or drop --container"})
		return true, err
	}
	if strings.TrimSpace(spec.EgressOpen) != "" && cs.Network == ContainerNetworkNone {
		return false, errors.New("--egress-open and --container-network none contradict each other: leave out one of them")
	}
	return false, nil
}

// runContainerLane takes a run for lane local-container from its carrier
// (the container's, walled or not) to its final record.
func runContainerLane(ctx context.Context, store *records.Store, spec Spec, rec *probe.Record,
	run *records.Run, pol *policy.Policy, pins map[string][]netip.Addr, carrier carry.Carrier, ct *container.Carrier) (*records.Run, error) {
	open := strings.TrimSpace(spec.EgressOpen) != ""
	noNetwork := spec.Container.Network == ContainerNetworkNone
	switch {
	case open:
		// As a local open run: no measurement needed, the reason recorded.
		run.Network = "open"
		run.Seal = sealOf(ctx, pol, sealNotOpen)
	case noNetwork:
		run.Why = whyNoNetwork
		run.Network = NetworkNone
		run.Seal = sealOf(ctx, pol, sealNotNetwork)
	default:
		run.Seal = sealOf(ctx, pol, sealNotContainer)
	}
	warnSeal(spec.Warn, run.ID, run.Seal)
	eng, err := container.DetectRemembered(ctx, spec.Container.Engine)
	if err != nil {
		if noNetwork || open {
			run.State = records.StateRunning
			return finish(ctx, store, run, 0, err)
		}
		return refuse(store, run, &carry.Refusal{Lane: run.Lane, Machine: run.Machine, MeasuredAt: measuredAt(rec),
			AtRunTime: fmt.Sprintf("no container engine can run it now (%v)", err),
			Fix:       "install podman and runc, or start the docker daemon; then run 'postern machine probe-confinement' again"})
	}
	ct.Engine = eng
	run.State = records.StateRunning
	if err := store.PutRun(run); err != nil {
		return nil, err
	}
	started(spec, run)
	if open {
		warnOpen(spec.Warn, run, "the container engine's own, no wall, no door")
	}
	// The container starts from its image's environment: with a terminal
	// its TERM, and what is passed.
	var env []string
	if isTerminal(spec.Stdin) {
		for _, kv := range spec.Env {
			if strings.HasPrefix(kv, "TERM=") {
				env = append(env, kv)
			}
		}
	}
	env = append(env, spec.PassEnv...)
	code, err := runLocal(ctx, store, run, spec, pol, pins, carrier,
		Walled{InContainer: true, Open: open, NoNetwork: noNetwork, Env: env}, nil)
	return finish(ctx, store, run, code, err)
}

// containerNotRun is a command the container's harness could not start at
// all, as a *CommandError; otherwise the run's status and error as they are.
func containerNotRun(wall carry.Wall, command string, code int, err error) (int, error) {
	if err != nil {
		return code, err
	}
	ns, ok := wall.(interface {
		NotStarted() (code int, why string, ok bool)
	})
	if !ok {
		return code, nil
	}
	if c, why, ok := ns.NotStarted(); ok && c == code && (c == 126 || c == 127) {
		return code, &CommandError{Command: command, NotFound: c == 127, Detail: termtext.Printable(why) + ", in the container"}
	}
	return code, nil
}
