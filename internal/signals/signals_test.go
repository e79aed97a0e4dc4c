package signals

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestNotifyRelaysOnceHeld(t *testing.T) {
	c := make(chan os.Signal, 2)
	held := Notify(c, syscall.SIGUSR1, syscall.SIGUSR2)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the signals were not held within 10s")
	}
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		// Unhandled, either would end the test binary.
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-c:
			if got != sig {
				t.Fatalf("relayed %v, want %v", got, sig)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v was not relayed within 10s", sig)
		}
	}
}
