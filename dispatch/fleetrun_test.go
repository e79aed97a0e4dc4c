package dispatch

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/records"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count descriptors: %v", err)
	}
	return len(ents)
}

// The runner carries each attempt through Run: its record names the
// dispatch and task, its output is kept stream by stream, a cancel stops
// it (recorded cancelled) and it leaves no goroutine or descriptor behind.
// The tasks open the network (no wall), so that the test needs no machine
// record; the walled lanes are tested through the binary.
func TestFleetRunnerOutputCancelAndLeaks(t *testing.T) {
	store, err := records.Open(filepath.Join(t.TempDir(), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	src := `
task "talk" {
  command = ["sh", "-c", "echo out-talk; echo err-talk >&2; exit 3"]
  network = "open"
  reason  = "a test of the runner"
  env     = { WHO = "talk" }
}
task "wait" {
  command = ["sh", "-c", "echo $WHO; exec sleep 30"]
  network = "open"
  reason  = "a test of the runner"
  env     = { WHO = "waiter" }
}
`
	f, err := fleet.Parse("tasks.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runner := &FleetRunner{Store: store, Base: Spec{Env: os.Environ()}, Dir: t.TempDir()}
	var cancelledAt time.Time
	rec, err := fleet.Run(ctx, fleet.Config{
		File: f, Machines: []fleet.Machine{{Machine: machine.LocalMachine(), Slots: 2}}, Runner: runner,
		OnChange: func(c fleet.Change, r *fleet.Record) {
			if c.Task == "wait" && c.State == fleet.Running && cancelledAt.IsZero() {
				// Its echo is out before the cancel: give it a moment.
				time.AfterFunc(300*time.Millisecond, cancel)
				cancelledAt = time.Now()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(cancelledAt); took > fleet.DefaultStopGrace {
		t.Fatalf("the cancelled run took %s to stop", took)
	}
	want := map[string]struct {
		state          fleet.State
		run            records.State
		stdout, stderr string
	}{
		"talk": {fleet.Failed, records.StateExited, "out-talk\n", "err-talk\n"},
		"wait": {fleet.Cancelled, records.StateCancelled, "waiter\n", ""},
	}
	for _, tr := range rec.Tasks {
		w := want[tr.Name]
		if tr.State != w.state || len(tr.Attempts) != 1 {
			t.Fatalf("task %s: %s, %d attempts (%s)", tr.Name, tr.State, len(tr.Attempts), tr.Why)
		}
		r, err := store.Run(tr.Attempts[0].RunID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != w.run || r.Dispatch != rec.ID || r.Task != tr.Name {
			t.Fatalf("task %s's run record: state %s, dispatch %q, task %q", tr.Name, r.State, r.Dispatch, r.Task)
		}
		out, _, _ := store.Output(r.ID, records.Stdout)
		errOut, _, _ := store.Output(r.ID, records.Stderr)
		done, _ := store.OutputDone(r.ID)
		if string(out) != w.stdout || string(errOut) != w.stderr || !done {
			t.Fatalf("task %s's output: %q %q (done %v)", tr.Name, out, errOut, done)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > goroutines || openFDs(t) > fds {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("after the dispatch: %d goroutines (%d before), %d descriptors (%d before)\n%s",
				runtime.NumGoroutine(), goroutines, openFDs(t), fds, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
