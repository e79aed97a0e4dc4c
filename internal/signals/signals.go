package signals

import (
	"os"
	"os/signal"
)

// Hold ignores sig at once (ignoring a signal costs no round trip), then has
// them relayed to c, as signal.Notify does, from a goroutine of its own; the
// channel it returns is closed once c is registered for every one of them
// (a signal that finds c full is dropped, as with signal.Notify). Until
// then one of them that arrives is lost rather than given its default
// action, which for most is to end the process; a child started meanwhile
// inherits them ignored.
//
// Hold is for signals the process has not asked for before: ignoring one
// cancels every earlier Notify of it.
func Hold(c chan<- os.Signal, sig ...os.Signal) <-chan struct{} {
	signal.Ignore(sig...)
	held := make(chan struct{})
	go func() {
		defer close(held)
		signal.Notify(c, sig...)
	}()
	return held
}
