package records

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/postern-dev/postern/internal/testhosts"
)

// tmpfs mounts a small tmpfs for a store.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	testhosts.RequireRoot(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "records-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	return dir
}

// fillUp writes a file in dir until its filesystem is full.
func fillUp(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// A full filesystem does not cost a run its record: the room kept in reserve
// is given back for it.
func TestPutRunUsesTheReserveWhenFull(t *testing.T) {
	big := &Run{ID: "big", State: StateExited, Command: []string{strings.Repeat("x", 300<<10)}}
	t.Run("with the reserve", func(t *testing.T) {
		dir := tmpfs(t, "2m")
		s, err := Open(filepath.Join(dir, "records.db"))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(s.reservePath()); err != nil || st.Size() != reserveSize {
			t.Fatalf("reserve: %v", err)
		}
		fillUp(t, dir)
		if err := s.PutRun(big); err != nil {
			t.Fatalf("PutRun on a full filesystem with a reserve: %v", err)
		}
		if r, err := s.Run("big"); err != nil || r.Command[0] != big.Command[0] {
			t.Fatalf("the record written: %v", err)
		}
		if _, err := os.Stat(s.reservePath()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the reserve is still there: %v", err)
		}
		// With room again, the next Open keeps a reserve again.
		if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(s.Path()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.reservePath()); err != nil {
			t.Fatalf("no reserve after reopening with room: %v", err)
		}
	})
	t.Run("without", func(t *testing.T) {
		dir := tmpfs(t, "2m")
		s, err := Open(filepath.Join(dir, "records.db"))
		if err != nil {
			t.Fatal(err)
		}
		s.releaseReserve()
		fillUp(t, dir)
		err = s.PutRun(big)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "records file "+s.Path()) || !strings.Contains(err.Error(), "free space on its filesystem") {
			t.Fatalf("PutRun on a full filesystem: %v", err)
		}
	})
}
