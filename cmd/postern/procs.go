package main

import (
	"os"
	"runtime"
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
func leaveCoresToTheRun() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/2))
}
