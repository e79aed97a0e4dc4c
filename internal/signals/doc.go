// Package signals has a process told of signals without waiting for it.
//
// Each signal a Go process first asks to be told of (os/signal's Notify)
// costs a round trip between the asking goroutine and the runtime's signal
// thread, a thread handed over and back: 45–60 µs each on a two-core
// machine in a program that does nothing else, 0.1 ms and more in one that
// is busy. Asked for on a goroutine of their own, they are made in the gaps
// of the process's own work; ignored until then, one that comes early is
// lost rather than ending the process.
package signals
