package netwall

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/postern-dev/postern/internal/testhosts"
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

// TestStartPathsAlike: a command started from the init's dropped thread has
// what one started through the exec stage has: no capabilities, locked
// securebits, no_new_privs, one seccomp filter, only stdin, stdout and
// stderr open, the same working directory, the same environment; and it
// cannot make a setuid file. A relative PATH entry sends the start through
// the stage.
func TestStartPathsAlike(t *testing.T) {
	testhosts.RequireRoot(t)
	const probe = `grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
echo "== fds"; ls /proc/self/fd
echo "== cwd"; pwd
echo "== env"; env | grep -v '^PWD=\|^SHLVL=\|^_=' | sort
echo "== setid"; cp /bin/true ./t && chmod 4755 ./t 2>/dev/null; ls -l ./t | cut -c1-10`
	state := func(path string) string {
		dir := t.TempDir()
		env := []string{"PATH=" + path, "HOME=" + os.Getenv("HOME"), "K=v"}
		r := runSpec(t, Spec{Command: []string{"sh", "-c", probe}, Dir: dir, Env: env}, nil)
		if r.code != 0 {
			t.Fatalf("PATH=%s: exit %d, stderr %q", path, r.code, r.stderr)
		}
		return strings.ReplaceAll(r.stdout, dir, "DIR")
	}
	if _, _, ok := lookCommand("sh", []string{"PATH=/usr/bin:/bin"}); !ok {
		t.Fatal("sh with PATH=/usr/bin:/bin is not started directly")
	}
	if _, _, ok := lookCommand("sh", []string{"PATH=/usr/bin:/bin:."}); ok {
		t.Fatal("sh with PATH=/usr/bin:/bin:. is not started through the exec stage")
	}
	direct := state("/usr/bin:/bin")
	staged := state("/usr/bin:/bin:.")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "Seccomp_filters:\t1",
		"== fds\n0\n1\n2\n3\n== cwd\nDIR\n", "-rwxr-xr-x"} {
		if !strings.Contains(direct, want) {
			t.Errorf("started directly, the command lacks %q:\n%s", want, direct)
		}
	}
	if want := strings.Replace(direct, "PATH=/usr/bin:/bin\n", "PATH=/usr/bin:/bin:.\n", 1); staged != want {
		t.Errorf("through the exec stage:\n%s\nstarted directly:\n%s", staged, direct)
	}
}

// TestInitOutOfReach: the command cannot open the init's descriptors through
// any of its threads in /proc, the thread it was started from included, and
// the init's main thread, which /proc shows as pid 1, keeps its credentials.
// Which thread starts the command varies from run to run, so it runs a few
// times.
func TestInitOutOfReach(t *testing.T) {
	testhosts.RequireRoot(t)
	const probe = `grep '^CapEff:' /proc/1/status
for t in /proc/1/task/*; do readlink "$t/fd/0" >/dev/null 2>&1 && echo "OPEN $t"; cat "$t/environ" >/dev/null 2>&1 && echo "READ $t"; done
echo checked`
	for i := 0; i < 20; i++ {
		r := runSpec(t, Spec{Command: []string{"sh", "-c", probe}}, nil)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "checked") {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "OPEN") || strings.Contains(r.stdout, "READ") {
			t.Fatalf("run %d: the command reached the init through /proc:\n%s", i, r.stdout)
		}
		if strings.Contains(r.stdout, "CapEff:\t0000000000000000") {
			t.Fatalf("run %d: the init's main thread lost its capabilities:\n%s", i, r.stdout)
		}
	}
}
