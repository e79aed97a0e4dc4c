package workspace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCopiedIndexKeepsRacyChanges: a file changed in the instant its index
// was written (same size, same timestamp as the index) is a change git finds
// through an index copied by copyIndex, and misses through a copy with a time
// of its own: the case that lost a fast run's write from its result. (ctime,
// which a test cannot set, is left out of git's comparison here.)
func TestCopiedIndexKeepsRacyChanges(t *testing.T) {
	repo := t.TempDir()
	testGit(t, repo, "init", "-q")
	f := filepath.Join(repo, "f")
	at := time.Now().Add(-time.Minute).Truncate(time.Second).Add(123456789)
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("1\n")
	testGit(t, repo, "-c", "core.trustctime=false", "add", "f")
	index := filepath.Join(repo, ".git", "index")
	if err := os.Chtimes(index, at, at); err != nil {
		t.Fatal(err)
	}
	// The run's write, in the same instant as the index and the file's.
	write("3\n")
	changed := func(idx string) bool {
		t.Helper()
		t.Setenv("GIT_INDEX_FILE", idx)
		return testGit(t, repo, "-c", "core.trustctime=false", "diff-files", "--name-only") == "f"
	}
	kept := filepath.Join(t.TempDir(), "kept")
	if err := copyIndex(index, kept); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	b, _ := os.ReadFile(index)
	if err := os.WriteFile(plain, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if !changed(kept) {
		t.Error("through the index copied with its time, the change to f is missed")
	}
	if changed(plain) {
		t.Error("git found the change through a plain copy too: this test no longer shows what copyIndex is for")
	}
}
