package netwall

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestWaitAfterEveryProcess: Wait may return before the init has exited (the
// host then writes its final record while the namespaces are torn down), but
// never while a process of the run other than the init is there, however
// the run tries to outlast its command: children that ignore SIGTERM, a new
// session, a shell forking as fast as it can.
func TestWaitAfterEveryProcess(t *testing.T) {
	requireRoot(t)
	script := "trap '' TERM HUP; " +
		"(trap '' TERM; sleep 1000) & " +
		"setsid sleep 1000 & " +
		"(while :; do sleep 1000 & done) & " +
		"sleep 0.2; exit 7"
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		w, err := Raise(ctx, Spec{Command: []string{"sh", "-c", script}, Dir: t.TempDir()})
		if err != nil {
			cancel()
			t.Fatalf("Raise: %v", err)
		}
		serveDoor(t, w.Listeners())
		if err := w.Start(ctx); err != nil {
			w.Close()
			cancel()
			t.Fatalf("Start: %v", err)
		}
		pidns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", w.Pid()))
		if err != nil {
			w.Close()
			cancel()
			t.Fatalf("the run's pid namespace: %v", err)
		}
		code, err := w.Wait()
		// At once: nothing but the init (which may be exiting) is left.
		left := slices.DeleteFunc(processesIn("pid", pidns), func(p string) bool { return p == strconv.Itoa(w.Pid()) })
		if err != nil || code != 7 {
			t.Errorf("round %d: Wait = %d, %v; want 7", round, code, err)
		}
		if len(left) > 0 {
			t.Errorf("round %d: %d processes of the run still there when Wait returned: %v", round, len(left), left[:min(len(left), 10)])
		}
		w.Close()
		cancel()
		if left := processesIn("pid", pidns); len(left) > 0 {
			t.Errorf("round %d: processes left after Close: %v", round, left)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", w.Pid())); err == nil {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.Pid())); len(st) > 0 {
				// A pid reused by the host is not the init.
				if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", w.Pid())); ns == pidns {
					t.Errorf("round %d: the init is still there after Close", round)
				}
			}
		}
	}
}
