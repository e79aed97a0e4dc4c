package netwall

import (
	"fmt"
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

// TestIndexGitlinks reads the submodules of indexes git itself wrote, of
// every version and object format this git writes.
func TestIndexGitlinks(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	for _, tc := range []struct {
		name string
		init []string
		ver  string
	}{
		{"v2", []string{"init", "-q"}, "2"},
		{"v3", []string{"init", "-q"}, "3"},
		{"v4", []string{"init", "-q"}, "4"},
		{"sha256-v4", []string{"init", "-q", "--object-format=sha256"}, "4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			git := func(d string, args ...string) error {
				cmd := exec.Command("git", args...)
				cmd.Dir = d
				cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test",
					"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test")
				out, err := cmd.CombinedOutput()
				if err != nil {
					return fmt.Errorf("git %v: %v\n%s", args, err, out)
				}
				return nil
			}
			if err := git(dir, tc.init...); err != nil {
				t.Skip(err) // this git writes no such repository
			}
			for _, p := range []string{"a/x", "a/very/long/path/name/that/shares/a/prefix/y", "b"} {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
				os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644)
			}
			for _, sub := range []string{"mods/one", "mods/two"} {
				args := append(append([]string{"init", "-q"}, tc.init[2:]...), sub)
				must(t, git(dir, args...), nil)
				must(t, git(filepath.Join(dir, sub), "commit", "-q", "--allow-empty", "-m", "x"), nil)
			}
			must(t, git(dir, "add", "-A"), nil)
			os.WriteFile(filepath.Join(dir, "c"), []byte("c"), 0o644)
			must(t, git(dir, "add", "--intent-to-add", "c"), nil) // an extended flag, in v3 and later
			must(t, git(dir, "update-index", "--index-version", tc.ver), nil)
			b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
			if err != nil {
				t.Fatal(err)
			}
			links, err := indexGitlinks(b)
			if err != nil || strings.Join(links, " ") != "mods/one mods/two" {
				t.Errorf("gitlinks %q, %v; want mods/one mods/two", links, err)
			}
		})
	}
}

func must(t *testing.T, err error, _ any) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzIndexGitlinks(f *testing.F) {
	f.Add([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20)))
	f.Add([]byte("DIRC\x00\x00\x00\x04\x00\x00\x00\x01" + strings.Repeat("\x00", 62) + "\x05a\x00" + strings.Repeat("\x00", 20)))
	f.Fuzz(func(t *testing.T, b []byte) {
		links, err := indexGitlinks(b)
		if err == nil && len(links) > len(b) {
			t.Fatalf("%d gitlinks from %d bytes", len(links), len(b))
		}
	})
}
