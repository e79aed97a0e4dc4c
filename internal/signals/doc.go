// Package signals has a process told of signals without waiting for it.
//
// Each signal a Go process first asks to be told of (os/signal's Notify)
// costs a round trip between the asking goroutine and the runtime's signal
// thread, a thread handed over and back: 0.1–0.25 ms each on a small
// virtual machine, so 0.7–1.8 ms for the seven a run forwards. Asked for on
// a goroutine of their own, they are made while the process waits for
// something else.
package signals
