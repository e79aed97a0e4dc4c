package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreAlternates: what a run wrote over its copy's
// objects/info/alternates (another object directory of the machine's, or
// a link in place of the info directory) is replaced by what Prepare
// recorded before the result is read.
func TestRestoreAlternates(t *testing.T) {
	root := t.TempDir()
	p := Places{Cache: filepath.Join(root, "cache"), Runs: filepath.Join(root, "runs")}
	run := filepath.Join(p.Runs, "RUN")
	info := filepath.Join(run, ".git", "objects", "info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(p.Cache, "r-1.git", "objects") + "\n"
	if err := os.WriteFile(p.alternatesFile("RUN"), []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(root, "elsewhere")
	for _, plant := range []func() error{
		func() error {
			return os.WriteFile(filepath.Join(info, "alternates"), []byte("/etc\n"+elsewhere+"\n"), 0o644)
		},
		func() error {
			if err := os.RemoveAll(info); err != nil {
				return err
			}
			return os.Symlink(elsewhere, info)
		},
		func() error { return os.Remove(filepath.Join(info, "alternates")) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if err := restoreAlternates(p, run, "RUN"); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Lstat(info); err != nil || !st.IsDir() {
			t.Fatalf("objects/info after restoring: %v %v", st, err)
		}
		if got, err := os.ReadFile(filepath.Join(info, "alternates")); err != nil || string(got) != want {
			t.Fatalf("alternates after restoring: %q %v, want %q", got, err, want)
		}
	}
	// A copy prepared with nothing to borrow from has no alternates after.
	if err := os.WriteFile(p.alternatesFile("RUN"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := restoreAlternates(p, run, "RUN"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(info, "alternates")); !os.IsNotExist(err) {
		t.Fatalf("alternates left where none was written: %v", err)
	}
}
