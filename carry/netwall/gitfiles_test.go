package netwall

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestGitTopFiles(t *testing.T) {
	id := strings.Repeat("a1", 20)
	id256 := strings.Repeat("b2", 32)
	for _, tc := range []struct {
		name, data string
		ok         bool
	}{
		{"HEAD", "ref: refs/heads/main\n", true},
		{"HEAD", id + "\n", true},
		{"HEAD", id256, true},
		{"HEAD", "ref: refs/heads/../../config\n", false},
		{"HEAD", "ref: /tmp/evil\n", false},
		{"HEAD", "ref: refs/heads/a b\n", false},
		{"HEAD", "ref: refs/heads/main\nref: refs/heads/x\n", false},
		{"ORIG_HEAD", id + "\n", true},
		{"ORIG_HEAD", "[core]\n\tfsmonitor = evil\n", false},
		{"MERGE_HEAD", id + "\n" + id256 + "\n", true},
		{"shallow", id + "\n", true},
		{"FETCH_HEAD", id + "\t\tbranch 'main' of https://example.test/r\n" + id + "\tnot-for-merge\tbranch 'x'\n", true},
		{"FETCH_HEAD", "evil\n", false},
		{"COMMIT_EDITMSG", "a message, of any text\n# comments\n", true},
		{"COMMIT_EDITMSG", "nul\x00byte", false},
		{"packed-refs", "# pack-refs with: peeled fully-peeled sorted \n" + id + " refs/heads/main\n^" + id + "\n" + id + " refs/tags/v1\n", true},
		{"packed-refs", id + " refs/heads/../x\n", false},
		{"packed-refs", "[core]\n", false},
		{"index", "DIRC\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20), true}, // index.skipHash
		{"index", "DIRC\x00\x00\x00\x09\x00\x00\x00\x00" + strings.Repeat("\x00", 20), false},
		{"index", "[core]\n\tfsmonitor = evil\n" + strings.Repeat("x", 40), false},
		{"index", "DIRC\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x01", 20), false},
		{"sharedindex." + id, "DIRC\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20), true},
	} {
		check, ok := gitTopFile(tc.name)
		if !ok {
			t.Fatalf("%s is not a top file", tc.name)
		}
		if err := check([]byte(tc.data)); (err == nil) != tc.ok {
			t.Errorf("%s %q: %v, want ok=%v", tc.name, tc.data, err, tc.ok)
		}
	}
	for _, name := range []string{"config", "config.worktree", "commondir", "gitdir", "hooks", "info", "description",
		"modules", "worktrees", "objects", "refs", "logs", "sharedindex.x", "index.lock", "rebase-merge", "sequencer", "HEAD.lock"} {
		if _, ok := gitTopFile(name); ok {
			t.Errorf("%s would be copied back to the host's git directory", name)
		}
	}
}

// TestGitTopFilesAcceptGit checks the files git itself wrote, in a repository
// made here, against the checks: what git writes must pass.
func TestGitTopFilesAcceptGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	os.WriteFile(filepath.Join(dir, "f"), []byte("x\n"), 0o644)
	git("add", "f")
	git("commit", "-qm", "one")
	git("tag", "v1")
	git("branch", "side")
	git("pack-refs", "--all")
	git("-c", "index.skipHash=true", "update-index", "--refresh")
	git("checkout", "-q", "side")
	git("commit", "-q", "--allow-empty", "-m", "two")
	git("checkout", "-q", "-")
	git("merge", "-q", "--no-ff", "-m", "merged", "side")
	git("update-index", "--index-version", "4")
	for _, name := range []string{"HEAD", "ORIG_HEAD", "packed-refs", "index", "COMMIT_EDITMSG"} {
		data, err := os.ReadFile(filepath.Join(dir, ".git", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check, _ := gitTopFile(name)
		if err := check(data); err != nil {
			t.Errorf("git's own %s was refused: %v", name, err)
		}
	}
}

func FuzzGitTopFile(f *testing.F) {
	f.Add("HEAD", []byte("ref: refs/heads/main\n"))
	f.Add("packed-refs", []byte("# pack-refs with: peeled\n"+strings.Repeat("0", 40)+" refs/heads/x\n"))
	f.Add("index", []byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x00"+strings.Repeat("\x00", 20)))
	f.Add("FETCH_HEAD", []byte(strings.Repeat("0", 40)+"\tx\n"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		check, ok := gitTopFile(name)
		if !ok {
			return
		}
		if check(data) != nil {
			return
		}
		// What passes is never git's configuration: no section header
		// outside a message.
		switch name {
		case "COMMIT_EDITMSG", "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG", "TAG_EDITMSG":
			return
		}
		if name == "HEAD" && strings.Contains(string(data), "..") {
			t.Fatalf("HEAD %q passed with ..", data)
		}
		if strings.HasPrefix(string(data), "[") {
			t.Fatalf("%s %q passed and reads as configuration", name, data)
		}
	})
}
