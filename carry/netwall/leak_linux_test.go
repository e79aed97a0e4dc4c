package netwall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, e.Name()+"->"+target)
	}
	return out
}

// children lists this process's child pids, over all its threads.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		if err == nil {
			out = append(out, strings.Fields(string(b))...)
		}
	}
	return out
}

func TestWallLeavesNothing(t *testing.T) {
	requireRoot(t)
	const cycles = 50
	dir := t.TempDir()
	// One cycle first, so lazily created runtime threads and pollers count as
	// the baseline rather than as leaks.
	cycle := func() (netns, userns string, raise, run time.Duration) {
		t0 := time.Now()
		w, err := Raise(context.Background(), Spec{Command: []string{"true"}, Ports: []uint16{80, 443}, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		raise = time.Since(t0)
		netns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", w.Pid()))
		userns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/user", w.Pid()))
		t1 := time.Now()
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if code, err := w.Wait(); code != 0 || err != nil {
			t.Fatalf("true inside the wall: exit %d, %v", code, err)
		}
		run = time.Since(t1)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		return netns, userns, raise, run
	}
	cycle()
	fds0, gr0, kids0 := openFDs(t), runtime.NumGoroutine(), children(t)

	hostNet, _ := os.Readlink("/proc/self/ns/net")
	var namespaces []string
	var raiseTotal, runTotal time.Duration
	for range cycles {
		netns, userns, raise, run := cycle()
		if netns == "" || userns == "" || netns == hostNet {
			t.Fatalf("a wall's namespaces while it ran: net %q (host %q), user %q", netns, hostNet, userns)
		}
		namespaces = append(namespaces, netns, userns)
		raiseTotal += raise
		runTotal += run
	}
	t.Logf("%d cycles: Raise %v, Start+Wait of true %v on average", cycles,
		(raiseTotal / cycles).Round(time.Microsecond), (runTotal / cycles).Round(time.Microsecond))

	// Goroutines of closed listeners may take a moment to unwind.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > gr0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if gr := runtime.NumGoroutine(); gr > gr0 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after %d cycles\n%s", gr0, gr, cycles, buf[:runtime.Stack(buf, true)])
	}
	if fds := openFDs(t); len(fds) > len(fds0) {
		t.Errorf("open descriptors: %d before, %d after %d cycles: %v", len(fds0), len(fds), cycles, fds)
	}
	if kids := children(t); len(kids) > len(kids0) {
		t.Errorf("child processes: %v before, %v after", kids0, kids)
	}
	// Namespace inodes are recycled once freed and other processes on the
	// machine make namespaces too: a process found in one of the walls'
	// namespaces is a leak only if it descends from this test.
	seen := map[string]bool{}
	for _, ns := range namespaces {
		if seen[ns] {
			continue
		}
		seen[ns] = true
		kind, _, _ := strings.Cut(ns, ":")
		for _, pid := range processesIn(kind, ns) {
			if descendsFrom(pid, os.Getpid()) {
				t.Errorf("process %s of this test is still in a closed wall's %s", pid, ns)
			}
		}
	}
}

func descendsFrom(pid string, ancestor int) bool {
	for range 64 {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			return false
		}
		// The parent pid is the second field after the parenthesised name.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			return false
		}
		if f[1] == strconv.Itoa(ancestor) {
			return true
		}
		if f[1] == "0" || f[1] == "1" {
			return false
		}
		pid = f[1]
	}
	return false
}
