package main

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
)

// leaveCoresToTheRun caps the Go scheduler of a process that serves a door at
// half the cores it would use (at least one), unless GOMAXPROCS is set.
//
// A door's work is in the kernel (connect, splice, the TCP stack), which runs
// on the calling thread whatever the cap; the door's own Go code per
// connection is a few microseconds. Each idle P, though, is a thread the
// scheduler wakes to spin whenever a goroutine becomes ready, and on a small
// machine those wake-ups are taken from the run the door guards and from the
// connection being set up. Measured on 2 cores (one P instead of two): 85 µs
// less added to a connection's setup and 110 µs less CPU per connection, the
// same bulk throughput, 12 % fewer keep-alive requests/s.
//
// It caps once: a second call changes nothing.
func leaveCoresToTheRun() {
	coresMu.Lock()
	defer coresMu.Unlock()
	if coresLeft || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	coresLeft = true
	coresBefore = runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/2))
}

var (
	coresMu     sync.Mutex
	coresLeft   bool
	coresBefore int
)

// capAfter is how long a run whose wall postern sets up itself keeps every
// core once it is recorded as running (see leaveCoresLater).
const capAfter = 25 * time.Millisecond

// leaveCoresLater caps the scheduler capAfter from now rather than at once:
// where postern sets the wall up itself (netwall.SetsUpItself), the mounts,
// the network and the door's start are postern's own threads' work beside
// one another, and one scheduler thread would take them in turn (1.6 ms
// more to a run of true on 2 cores, measured). A command that is over by
// then never pays for the cap's stop of the world; the door of one that
// lasts serves capped, as before.
func leaveCoresLater() { time.AfterFunc(capAfter, leaveCoresToTheRun) }

// takeCoresBack lifts the cap of leaveCoresToTheRun from a process that
// turned out to serve no door (a run on another machine).
func takeCoresBack() {
	coresMu.Lock()
	defer coresMu.Unlock()
	if coresLeft {
		runtime.GOMAXPROCS(coresBefore)
		coresLeft = false
	}
}

// leaveCoresEarly caps the scheduler at the very start of a command that
// will most likely serve a door (a run: on this machine unless it says
// otherwise). Capping later costs more: the P given up hands every span its
// cache holds back to the heap, and on the first hand-back of each size the
// heap makes the list that takes it, a page touched for the first time.
// Capped at the start, that P has held next to nothing (0.3 ms less CPU per
// `postern run` on 2 cores).
func leaveCoresEarly(args []string) {
	if len(args) > 1 && args[1] == "run" && !slices.ContainsFunc(args[2:], isMachineFlag) && !netwall.SetsUpItself() {
		leaveCoresToTheRun()
	}
}

// isMachineFlag is whether a command-line word may name the machine of a
// run; a word after "--" may match too, which only leaves the cap to the
// run command itself.
func isMachineFlag(a string) bool {
	return a == "--machine" || len(a) > 10 && a[:10] == "--machine="
}
