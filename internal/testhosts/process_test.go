//go:build linux

package testhosts

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// processesIn lists the pids of processes whose network namespace is the
// host's, but this one's: a thread that entered the namespace and ended may be
// the main thread, which Go parks instead of ending, and /proc shows the
// main thread's namespace as the process's.
func processesIn(t *testing.T, h *Host) []int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, h.NetNS), &want); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestServerProcessesEndOnClose(t *testing.T) {
	RequireTool(t, "nginx", "nginx")
	RequireTool(t, "fcgiwrap", "fcgiwrap")
	RequireTool(t, "python3", "python3")
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := lab.Host(ctx, "procs")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	goroutines := runtime.NumGoroutine()

	ng, err := h.ServeNginx(ctx, NginxOptions{Root: root, GitRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	// master, one worker, four fcgiwrap children
	if n := len(processesIn(t, h)); n < 6 {
		t.Fatalf("%d processes in %s with nginx and fcgiwrap running, want at least 6", n, h.NetNS)
	}
	py, err := h.ServePython(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	withPython := len(processesIn(t, h))

	// Closing nginx ends nginx and fcgiwrap only.
	if err := ng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ng.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if pids := processesIn(t, h); len(pids) != 1 {
		for _, p := range pids {
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
			t.Logf("pid %d: %q", p, b)
		}
		n := len(pids)
		t.Fatalf("%d processes in %s after nginx closed (%d before), want python's alone", n, h.NetNS, withPython)
	}
	if resp, err := directClient().Get(py.URL); err != nil {
		t.Fatalf("python stopped with nginx: %v", err)
	} else {
		resp.Body.Close()
	}
	// The host's close ends the rest.
	pids := processesIn(t, h)
	if err := h.close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still runs after the host closed", pid)
		}
	}
	// One goroutine (the spawner) outlives the servers by design.
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines+1 })
}
