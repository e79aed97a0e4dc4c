// Package container raises the network wall inside a local container's own network
// namespace, keeping the door on the host.
//
// The container is started by an engine (podman or docker, through the same
// command line) with no network of its own (--network none), every capability
// dropped, no-new-privileges, and postern's own static binary bind-mounted
// read-only as its entrypoint: the harness (InitArg). The harness connects back
// to the host over a unix socket bind-mounted into the container and waits. The
// host checks that the peer is the container's init (SO_PEERCRED against the
// engine's inspect), enters the container's network namespace on a locked OS
// thread and makes it the wall with netwall.Configure (lo only, routes via lo,
// the wall's nftables table, the door's listeners opened inside), then tells the
// harness to start the command. The door keeps running on the host and serves
// those listeners.
//
// The harness is the container's pid 1: it reaps, forwards signals to the
// command's process group, reports the command's exit status and, the moment the
// host's end of the socket closes (postern ended or was killed), kills everything
// in the container and exits, so the engine removes the container (--rm).
// Containers are labelled postern.run=<id> with the controller's pid, and Sweep,
// called on purpose (Raise never calls it: a controller out of this process's
// sight, in another pid namespace, is not a dead one), removes those whose
// controller is gone. The host directory holding the
// control socket and the container's resolv.conf is bound read-only (nothing
// the run makes there can reach the host) and removed as soon as the harness
// has connected; Sweep removes one a postern killed before that left.
//
// Of the network wall's filesystem rules, the container needs none: it sees
// no file of the host's but the harness binary and resolv.conf, both
// read-only, and what it writes stays in its own layer, removed with it. It
// gets the run's pids limit as the engine's --pids-limit.
//
// With NoNetwork the container keeps --network none and no wall is raised: it has
// no network at all. With Open (--egress-open) it gets the engine's own network
// and resolver and no wall: the one explicit, recorded way to open it.
package container
