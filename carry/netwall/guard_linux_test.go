package netwall

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestGuardedPaths finds the guarded files of a home and of the repository
// around the working directory — a plain .git directory, and a linked work
// tree whose .git file points at its git directory and that one's common
// directory — and leaves out what does not exist or is not writable anyway.
func TestGuardedPaths(t *testing.T) {
	home := t.TempDir()
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, ".bashrc"))
	write(filepath.Join(home, ".ssh", "config"))
	write(filepath.Join(home, ".cargo", "config.toml"))
	write(filepath.Join(home, ".config", "nvim", "init.lua"))
	main := filepath.Join(home, "main")
	write(filepath.Join(main, ".git", "config"))
	write(filepath.Join(main, ".git", "hooks", "pre-commit.sample"))
	write(filepath.Join(main, ".envrc"))
	// A linked work tree: .git is a file naming main's worktrees/wt.
	wtGit := filepath.Join(main, ".git", "worktrees", "wt")
	os.MkdirAll(wtGit, 0o755)
	os.WriteFile(filepath.Join(wtGit, "commondir"), []byte("../..\n"), 0o644)
	wt := filepath.Join(home, "wt")
	write(filepath.Join(wt, "src", "x.go"))
	os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+wtGit+"\n"), 0o644)

	writable := []string{home}
	cfg := initConfig{Dir: filepath.Join(main, "sub"), Env: []string{"HOME=" + home}}
	os.MkdirAll(cfg.Dir, 0o755)
	got := workPlacesOf(cfg).guardedPaths(writable)
	for _, want := range []string{
		filepath.Join(home, ".bashrc"), filepath.Join(home, ".ssh"),
		filepath.Join(home, ".cargo", "config.toml"), filepath.Join(home, ".config", "nvim"),
		filepath.Join(main, ".git", "config"), filepath.Join(main, ".git", "hooks"), filepath.Join(main, ".envrc"),
	} {
		if !slices.Contains(got, want) {
			t.Errorf("guardedPaths lacks %s: %v", want, got)
		}
	}
	if slices.Contains(got, filepath.Join(home, ".profile")) {
		t.Errorf("a file that does not exist is guarded: %v", got)
	}

	cfg.Dir = filepath.Join(wt, "src")
	got = workPlacesOf(cfg).guardedPaths(writable)
	for _, want := range []string{filepath.Join(main, ".git", "config"), filepath.Join(main, ".git", "hooks")} {
		if !slices.Contains(got, want) {
			t.Errorf("linked work tree: guardedPaths lacks the common directory's %s: %v", want, got)
		}
	}

	// Nothing writable: nothing to guard, the seal covers it.
	if got := workPlacesOf(cfg).guardedPaths([]string{"/nonexistent"}); len(got) != 0 {
		t.Errorf("guarded outside the writable directories: %v", got)
	}
}

// FuzzGitFileTarget reads .git files as a repository may hold them: what comes
// out is nothing or a clean absolute path.
func FuzzGitFileTarget(f *testing.F) {
	f.Add([]byte("gitdir: ../.git/worktrees/x\n"))
	f.Add([]byte("gitdir:/abs/path"))
	f.Add([]byte("\x00gitdir: \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), ".git")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got := gitFileTarget(p)
		if got != "" && (!filepath.IsAbs(got) || filepath.Clean(got) != got) {
			t.Fatalf("gitFileTarget(%q) = %q", b, got)
		}
	})
}

// TestRunDirs takes the work tree around the working directory, but not one
// whose top is the home's parent: a repository of the machine's.
func TestRunDirs(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	repo := filepath.Join(root, "srv", "repo")
	for _, d := range []string{filepath.Join(repo, ".git"), filepath.Join(repo, "src"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := workPlacesOf(initConfig{Dir: filepath.Join(repo, "src"), Env: []string{"HOME=" + home}}).runDirs()
	want := []string{filepath.Join(repo, "src"), repo, filepath.Join(repo, ".git"), home}
	if !slices.Equal(got, want) {
		t.Errorf("runDirs in a repository's subdirectory = %v, want %v", got, want)
	}
	// The whole tree above the home is a repository: not a project.
	if err := os.Mkdir(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(home, "work")
	os.MkdirAll(work, 0o755)
	got = workPlacesOf(initConfig{Dir: work, Env: []string{"HOME=" + home}}).runDirs()
	if want := []string{work, home}; !slices.Equal(got, want) {
		t.Errorf("runDirs under a repository above the home = %v, want %v", got, want)
	}
}
