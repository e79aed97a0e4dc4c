package netwall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// TestWallRefusalsRecorded attempts, from inside the wall, what the wall
// refuses before the door sees it — TCP to ports outside the policy's (IPv4,
// IPv6, and a name the door's DNS admitted), UDP other than DNS — and checks
// that each is refused and that the real door, served the wall's listeners,
// records each as a "wall" decision saying why.
func TestWallRefusalsRecorded(t *testing.T) {
	requireRoot(t)
	pol, err := policy.Parse("p.hcl", []byte("ports = [443]\nallow = [\"named.test\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		evs []event.Event
	)
	events := func() []event.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]event.Event(nil), evs...)
	}
	// attempt runs argv in a wall of its own served by a real door, and
	// returns what it printed.
	attempt := func(argv ...string) string {
		t.Helper()
		d, err := door.New(door.Config{Policy: pol, Emit: func(ev event.Event) {
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w, err := Raise(ctx, Spec{Command: argv, Ports: []uint16{443}, Stdout: out, Stderr: out, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		lis := w.Listeners()
		if lis.WallLog == nil {
			t.Fatal("the wall has no log of its refusals (nflog) on this kernel")
		}
		dctx, stop := context.WithCancel(ctx)
		doorDone := make(chan error, 1)
		go func() { doorDone <- d.Run(dctx, lis) }()
		defer func() {
			// Let the door read the last refusals before it stops.
			time.Sleep(100 * time.Millisecond)
			stop()
			if err := <-doorDone; err != nil {
				t.Errorf("door: %v", err)
			}
		}()
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out.Name())
		return strings.TrimSpace(string(b))
	}

	for _, a := range []struct{ network, addr string }{
		{"tcp", "192.0.2.1:8080"}, {"tcp", "[2001:db8::1]:22"}, {"udp", "192.0.2.1:9999"},
	} {
		if got := attempt(testExe, testDialArg, a.network, a.addr); got != "refused" && got != "denied" {
			t.Errorf("%s to %s from inside the wall: %q, want it refused", a.network, a.addr, got)
		}
	}
	if got := attempt("curl", "-sS", "--max-time", "5", "http://named.test:8080/"); !strings.Contains(got, "Couldn't connect") {
		t.Errorf("curl to an admitted name on a port outside the policy: %q, want it refused", got)
	}
	if got := attempt(testExe, testDialArg, "tcp", "192.0.2.1:443"); got != "connected" {
		t.Errorf("tcp to a policy port: %q, want it connected (to the door)", got)
	}

	want := map[string]string{
		"192.0.2.1:8080":  "port 8080 is not in the policy's ports [443]",
		"2001:db8::1:22":  "port 22 is not in the policy's ports [443]",
		"192.0.2.1:9999":  "udp to port 9999",
		"named.test:8080": "port 8080 is not in the policy's ports [443]",
	}
	count := map[string]int{}
	for _, ev := range events() {
		if ev.Kind != "wall" {
			continue
		}
		key := fmt.Sprintf("%s:%d", ev.Host, ev.Port)
		if w, ok := want[key]; !ok || ev.Decision != "deny" || !strings.Contains(ev.Reason, w) {
			t.Errorf("unexpected wall event %+v", ev)
			continue
		}
		count[key]++
	}
	// A repeated refusal (a client trying a name's addresses of each
	// family) is one event, and the others held back within the quiet second
	// come as one summary carrying their count.
	for key := range want {
		if count[key] < 1 || count[key] > 2 {
			t.Errorf("refusal of %s recorded %d times, want once, and at most one summary (events: %+v)", key, count[key], events())
		}
	}
}
