package signals

import (
	"os"
	"os/signal"
)

// Notify has sig relayed to c, as signal.Notify does, from a goroutine of
// its own, and returns at once; the channel it returns is closed once c is
// sure to receive every one of them. Until then each arrives as it would
// have before: a process that must not be ended by one waits on the
// channel first.
func Notify(c chan<- os.Signal, sig ...os.Signal) <-chan struct{} {
	held := make(chan struct{})
	go func() {
		defer close(held)
		signal.Notify(c, sig...)
	}()
	return held
}
