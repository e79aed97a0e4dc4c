package records

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/internal/testhosts"
)

// These tests find a lock's holders through /proc and run as another user.

// A store another process holds is an error naming it, in bounded time, also
// when the process that locked it has ended and a child keeps it open.
func TestLockedStoreNamesItsHolder(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("util-linux flock(1) is needed: %v", err)
	}
	for _, tc := range []struct {
		name, file string
		holder     string // the process name the error must give
		args       func(path string) []string
	}{
		{"store held", "records.db", "sleep", func(p string) []string { return []string{"-x", p, "sleep", "30"} }},
		{"turn held", "records.db.turn", "sleep", func(p string) []string { return []string{"-x", p, "sleep", "30"} }},
		{"held by the child of a process that ended", "records.db", "sleep", func(p string) []string {
			return []string{"-x", p, "sh", "-c", "sleep 30 & exit 0"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t)
			s.wait = 500 * time.Millisecond
			lockPath := filepath.Join(filepath.Dir(s.Path()), tc.file)
			cmd := exec.Command("flock", tc.args(lockPath)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				killHolders(lockPath)
			})
			waitHeld(t, lockPath)
			start := time.Now()
			_, err := s.Runs()
			took := time.Since(start)
			var le *LockedError
			if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
				t.Fatalf("read of a held store: %v", err)
			}
			if took > 3*time.Second {
				t.Fatalf("waited %s for a held store, want about %s", took, s.wait)
			}
			msg := err.Error()
			if !strings.Contains(msg, lockPath) || !strings.Contains(msg, "("+tc.holder+")") || !strings.Contains(msg, "end that process") {
				t.Fatalf("error %q does not name the file, the holder %q and the fix", msg, tc.holder)
			}
		})
	}
	t.Run("holder killed", func(t *testing.T) {
		s := openTemp(t)
		cmd := exec.Command("flock", "-x", s.Path(), "sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitHeld(t, s.Path())
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		killHolders(s.Path())
		start := time.Now()
		if _, err := s.Runs(); err != nil {
			t.Fatalf("after the holder was killed: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("took %s after the holder was killed", took)
		}
	})
}

// waitHeld waits until some other process has path open.
func waitHeld(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(holders(path)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no process took %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // flock(1) opens, then locks
}

// killHolders kills the processes this test started that still hold path.
func killHolders(path string) {
	for _, h := range holders(path) {
		var pid int
		if _, err := fmt.Sscanf(h, "pid %d", &pid); err == nil && isOurChild(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// isOurChild reports whether pid descends from this test process.
func isOurChild(pid int) bool {
	self := os.Getpid()
	for range 16 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		var ppid int
		fmt.Sscanf(f[1], "%d", &ppid)
		if ppid == self {
			return true
		}
		if ppid <= 1 {
			// Orphans of this test are re-parented to init; the sleep of the
			// ended process is one of them. Its name says it.
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			return strings.TrimSpace(string(comm)) == "sleep"
		}
		pid = ppid
	}
	return false
}

// A records file nobody but its owner may read is an error naming the file,
// its owner and the fix, for another user.
func TestStoreWithoutPermission(t *testing.T) {
	if os.Getenv("RECORDS_TEST_NOPERM") != "" {
		s := &Store{path: os.Getenv("RECORDS_TEST_NOPERM")}
		_, err := s.Runs()
		fmt.Println(err)
		return
	}
	testhosts.RequireRoot(t)
	dir := testhosts.OpenDir(t, "records-perm-")
	path := filepath.Join(dir, "records.db")
	if _, err := Open(path); err != nil {
		t.Fatal(err)
	}
	// The test binary, where another user may run it.
	bin := filepath.Join(dir, "records.test")
	if err := testhosts.CopyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestStoreWithoutPermission$")
	cmd.Env = append(os.Environ(), "RECORDS_TEST_NOPERM="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	msg := string(out)
	for _, want := range []string{path, "permission denied", "owned by uid 0", "POSTERN_HOME"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("as another user: %q does not say %q", msg, want)
		}
	}
}

// Close is bounded by its context even when the store is held by another
// process; what was not written is counted lost.
func TestEventLogCloseIsBounded(t *testing.T) {
	s := openTemp(t)
	s.wait = 3 * time.Second
	l := s.NewEventLog("r1", EventLogOptions{})
	cmd := exec.Command("flock", "-x", s.Path(), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); killHolders(s.Path()) })
	waitHeld(t, s.Path())
	for range 10 {
		l.Emit(event.Event{Event: "decision", Decision: "deny"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := l.Close(ctx)
	if took := time.Since(start); took > time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close took %s: %v", took, err)
	}
	// The writer ends once its transaction gives up; a second Close says how.
	err = l.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), filepath.Base(s.Path())) {
		t.Fatalf("second Close: %v", err)
	}
	if tl := l.Tally(); tl.Denied != 10 || tl.Lost != 10 || tl.Stored != 0 {
		t.Fatalf("tally %+v", tl)
	}
}
