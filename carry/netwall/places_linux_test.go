package netwall

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestPlanLayout plans the layout of runs in a home with a repository, a
// linked work tree, writable places and secrets, and checks what each gets:
// pure planning, no namespace.
func TestPlanLayout(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	mk := func(p, body string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if body == "/" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("home/.claude/settings.json", "{}")
	mk("home/.claude.json", "{}")
	mk("home/.ssh/id_rsa", "k")
	mk("home/.ssh/id_rsa.pub", "p")
	mk("home/.ssh/work_key", "k")
	mk("home/.ssh/known_hosts", "h")
	mk("home/.local/state/postern/records.db", "r")
	mk("home/src/proj/sub/f", "x")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	proj := filepath.Join(home, "src", "proj")
	git(proj, "init", "-q")
	git(proj, "add", "-A")
	git(proj, "commit", "-qm", "x")
	linked := filepath.Join(home, "src", "linked")
	git(proj, "worktree", "add", "-q", "-b", "l", linked)
	env := []string{"HOME=" + home}
	files := Files{
		Writable:  []Place{{Path: "~/.claude"}, {Path: "~/.claude.json"}, {Path: "~/.codex"}, {Path: "~/src/proj/sub"}},
		DenyRead:  []Place{{Path: "~/.ssh/*"}, {Path: "~/.aws/credentials"}},
		AllowRead: []Place{{Path: "~/.ssh/*.pub"}, {Path: "~/.ssh/known_hosts"}},
		Protect:   []string{filepath.Join(home, ".local/state/postern"), filepath.Join(root, "missing")},
		ReadOnly:  []string{filepath.Join(proj, "sub", "f"), "/usr/bin/env"},
	}

	l, err := planLayout(filepath.Join(proj, "sub"), env, files)
	if err != nil {
		t.Fatal(err)
	}
	want := layout{
		Home:     home,
		Binds:    []string{filepath.Join(home, ".claude"), proj},
		Git:      []gitPlace{{Dir: filepath.Join(proj, ".git"), Bound: []string{"objects", "refs", "logs"}}},
		Copies:   []string{".claude.json", ".codex"},
		ReadOnly: []string{filepath.Join(proj, "sub", "f")},
		Masks:    []string{filepath.Join(home, ".local/state/postern"), filepath.Join(home, ".ssh/id_rsa"), filepath.Join(home, ".ssh/work_key")},
	}
	if !equalLayout(l, want) {
		t.Errorf("in a subdirectory of a repository:\n got %+v\nwant %+v", l, want)
	}

	l, err = planLayout(linked, env, Files{})
	if err != nil {
		t.Fatal(err)
	}
	wtGit := filepath.Join(proj, ".git", "worktrees", "linked")
	if !slices.Equal(l.Binds, []string{linked}) || len(l.Git) != 2 || l.Git[0].Dir != filepath.Join(proj, ".git") || l.Git[1].Dir != wtGit ||
		!slices.Equal(l.ReadOnly, []string{filepath.Join(linked, ".git")}) {
		t.Errorf("in a linked work tree: %+v; want it bound, its .git file read-only, both git directories overlaid", l)
	}

	// A directory inside the home's dotfiles repository is the run's alone:
	// the work tree around it is the home.
	git(home, "init", "-q")
	mk("home/notes/a", "x")
	l, err = planLayout(filepath.Join(home, "notes"), env, Files{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Binds, []string{filepath.Join(home, "notes")}) || len(l.Git) != 0 {
		t.Errorf("in the home's own repository: %+v; want only the directory, no git directory", l)
	}

	// The workspaces' places: a run may work in its own copy there, but no
	// writable place may be, hold or lie in one (other runs' copies, the
	// cache they check out from).
	cache, runs := filepath.Join(home, ".cache/postern/workspaces"), filepath.Join(home, ".local/share/postern/workspaces")
	mk("home/.cache/postern/workspaces/r-1.git/HEAD", "ref: refs/heads/main\n")
	mk("home/.local/share/postern/workspaces/RUN/f", "x")
	guarded := Files{Guard: []string{cache, runs}}
	if _, err := planLayout(filepath.Join(runs, "RUN"), env, guarded); err != nil {
		t.Errorf("a run in its own copy: %v", err)
	}
	for _, w := range []string{"~/.cache", "~/.cache/postern/workspaces/r-1.git", "~/.local/share", "~/.local/share/postern/workspaces/OTHER"} {
		g := guarded
		g.Writable = []Place{{Path: w}}
		var pe *PlaceError
		if _, err := planLayout(proj, env, g); !errors.As(err, &pe) || !(strings.Contains(err.Error(), "postern's workspaces") || strings.Contains(err.Error(), "which programs outside the wall obey")) {
			t.Errorf("writable %q beside the workspaces' places: %v; want it refused", w, err)
		}
	}

	// No home: nothing of it is planned.
	l, err = planLayout(proj, []string{"HOME=" + filepath.Join(root, "nowhere")}, files)
	if err != nil || l.Home != "" || len(l.Copies) != 0 || slices.Contains(l.Binds, filepath.Join(home, ".claude")) {
		t.Errorf("with HOME missing: %+v, %v; want no home", l, err)
	}
}

func equalLayout(a, b layout) bool {
	if a.Home != b.Home || a.Keep != b.Keep || !slices.Equal(a.Binds, b.Binds) || !slices.Equal(a.Copies, b.Copies) ||
		!slices.Equal(a.ReadOnly, b.ReadOnly) || !slices.Equal(a.Masks, b.Masks) || len(a.Git) != len(b.Git) {
		return false
	}
	for i := range a.Git {
		if a.Git[i].Dir != b.Git[i].Dir || !slices.Equal(a.Git[i].Bound, b.Git[i].Bound) {
			return false
		}
	}
	return true
}

func TestReadSmallNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	if _, err := readSmall(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("readSmall of a FIFO: %v, want refused", err)
	}
	if _, err := readSmall("/proc/self/status"); err == nil {
		t.Error("readSmall read a file of the kernel's")
	}
	p := filepath.Join(dir, "gitfile")
	os.WriteFile(p, []byte("gitdir: ../x\n"+strings.Repeat("y", 10000)), 0o644)
	if b, err := readSmall(p); err != nil || len(b) != smallFile {
		t.Errorf("readSmall read %d bytes, %v; want %d", len(b), err, smallFile)
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
