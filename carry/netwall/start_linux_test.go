package netwall

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestLookCommandAsLookPath: the init finds a command where the exec stage's
// exec.LookPath finds it, and leaves to the stage what it cannot decide the
// same way (not found, relative PATH entries).
func TestLookCommandAsLookPath(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b, filepath.Join(b, "isdir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(a, "plain"), 0o644) // not executable: skipped
	write(filepath.Join(b, "plain"), 0o755)
	write(filepath.Join(a, "both"), 0o755)
	write(filepath.Join(b, "both"), 0o755)
	path := a + ":" + b
	for _, name := range []string{"plain", "both", "isdir", "missing", "sh"} {
		t.Setenv("PATH", path)
		want, werr := exec.LookPath(name)
		got, env, ok := lookCommand(name, []string{"A=1", "PATH=" + path})
		switch {
		case werr != nil && ok:
			t.Errorf("%s: found %q, LookPath: %v", name, got, werr)
		case werr == nil && (!ok || got != want):
			if name != "sh" { // sh is not in these directories
				t.Errorf("%s: %q %v, LookPath %q", name, got, ok, want)
			}
		case ok && !slices.Equal(env, []string{"A=1", "PATH=" + path}):
			t.Errorf("%s: environment changed to %q", name, env)
		}
	}
	if _, _, ok := lookCommand("plain", []string{"PATH=" + a + ":.:" + b}); ok {
		t.Error("a PATH with a relative entry was decided here, not by the stage")
	}
	if _, _, ok := lookCommand("plain", []string{"PATH=" + a + "::" + b}); ok {
		t.Error("a PATH with an empty entry (the working directory) was decided here, not by the stage")
	}
	if got, env, ok := lookCommand("/x/y", []string{"A=1"}); !ok || got != "/x/y" || !slices.Equal(env, []string{"A=1"}) {
		t.Errorf("a path: %q %q %v", got, env, ok)
	}
	// An empty PATH is the default one, for the lookup and the command, where
	// the stage's os.Setenv would put it.
	if got, env, ok := lookCommand("sh", []string{"PATH=", "B=2"}); !ok || filepath.Base(got) != "sh" || !slices.Equal(env, []string{"PATH=" + defaultPath, "B=2"}) {
		t.Errorf("empty PATH: %q %q %v", got, env, ok)
	}
	if _, env, ok := lookCommand("sh", []string{"B=2"}); !ok || !slices.Equal(env, []string{"B=2", "PATH=" + defaultPath}) {
		t.Errorf("no PATH: %q %v", env, ok)
	}
}

// TestOwnerAlive: a cgroup whose postern still runs is not swept, one whose
// postern is gone is.
func TestOwnerAlive(t *testing.T) {
	if !ownerAlive(cgroupPrefix + strconv.Itoa(os.Getpid()) + "-abc") {
		t.Error("this process's cgroup counted as left behind")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if ownerAlive(cgroupPrefix + strconv.Itoa(cmd.Process.Pid) + "-abc") {
		t.Error("an ended process's cgroup counted as in use")
	}
	for _, name := range []string{cgroupPrefix + "x-1", cgroupPrefix + "-1", cgroupPrefix + "test-abc"} {
		if ownerAlive(name) {
			t.Errorf("%q counted as in use", name)
		}
	}
}
