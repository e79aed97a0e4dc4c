package signals

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHoldRelaysOnceHeld(t *testing.T) {
	c := make(chan os.Signal, 2)
	held := Hold(c, syscall.SIGUSR1, syscall.SIGHUP)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the signals were not held within 10s")
	}
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGHUP} {
		// Not relayed, SIGHUP would end the test binary and SIGUSR1 be
		// dropped.
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

// TestHoldIgnoresUntilHeld holds SIGTERM in a child that signals itself
// before the relay's goroutine can have run: the signal is lost, not the
// child.
func TestHoldIgnoresUntilHeld(t *testing.T) {
	if os.Getenv("SIGNALS_TEST_CHILD") == "1" {
		c := make(chan os.Signal, 1)
		Hold(c, syscall.SIGTERM)
		// With one scheduler thread, the relay's goroutine has not run:
		// this one has not given the thread up since it was started.
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(100 * time.Millisecond)
		os.Stdout.WriteString("alive\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHoldIgnoresUntilHeld$")
	cmd.Env = append(os.Environ(), "SIGNALS_TEST_CHILD=1", "GOMAXPROCS=1")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "alive") {
		t.Fatalf("child: %v, output %q; want it alive after an early SIGTERM", err, out)
	}
}
