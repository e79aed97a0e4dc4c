//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/internal/testhosts"
)

// The built binary carries the wall's init (as make builds it): a run's pid 1
// is that init, kept in the records' directory, which the run cannot see;
// every run after the first uses the same file. Where postern sets the wall
// up itself, pid 1 is the small one attached to that init, kept beside it
// (TestWallStartsItsSmallPid1); POSTERN_WALL_INIT=go asks for the Go init.
func TestWallStartsItsOwnInit(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir(), Env: []string{"POSTERN_WALL_INIT=go"}}
	script := `tr '\0' ' ' < /proc/1/cmdline; echo; ls ` + p.Home + ` 2>&1 | head -1`
	first := p.exec(t, "run", "--", "sh", "-c", script)
	if first.Code != 0 {
		t.Fatalf("run: exit %d\n%s", first.Code, first.Stderr)
	}
	kept, _ := filepath.Glob(filepath.Join(p.Home, "lib", "wall-init-*"))
	if len(kept) != 1 {
		t.Fatalf("kept inits in %s/lib: %v", p.Home, kept)
	}
	lines := strings.Split(first.Stdout, "\n")
	// After InitArg, the network part of the init's configuration (its
	// ports), nothing else.
	if want := kept[0] + " __wall-init --ports="; !strings.HasPrefix(strings.TrimSpace(lines[0]), want) {
		t.Fatalf("the run's pid 1 is %q, want %q and the ports", lines[0], want)
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "No such file or directory") {
		t.Errorf("the run sees the records' directory: %q", first.Stdout)
	}
	st, err := os.Stat(kept[0])
	if err != nil || st.Mode().Perm() != 0o500 {
		t.Fatalf("kept init: %v %v", st.Mode(), err)
	}
	second := p.exec(t, "run", "--", "sh", "-c", script)
	if second.Code != 0 || !strings.HasPrefix(second.Stdout, kept[0]+" ") {
		t.Fatalf("second run: exit %d, pid 1 %q\n%s", second.Code, second.Stdout, second.Stderr)
	}
	if st2, _ := os.Stat(kept[0]); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the kept init was written again for the second run")
	}
	// The exec stage (Landlock, a command PATH finds only relatively) is
	// the kept init too.
	if r := p.exec(t, "run", "--", "no-such-command-here"); r.Code != 127 {
		t.Errorf("a command not found: exit %d, want 127\n%s", r.Code, r.Stderr)
	}
}

// Where postern sets the wall up itself (root, Linux 6.18), a run's pid 1
// is the small C program attached to the kept init, kept beside it under the
// init's name, which the run cannot see either.
func TestWallStartsItsSmallPid1(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	if !netwall.SetsUpItself() {
		t.Skip("postern does not set walls up itself here: they start the Go init")
	}
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	script := `tr '\0' ' ' < /proc/1/cmdline; echo; ls ` + p.Home + ` 2>&1 | head -1`
	first := p.exec(t, "run", "--", "sh", "-c", script)
	if first.Code != 0 {
		t.Fatalf("run: exit %d\n%s", first.Code, first.Stderr)
	}
	inits, _ := filepath.Glob(filepath.Join(p.Home, "lib", "wall-init-*"))
	pid1s, _ := filepath.Glob(filepath.Join(p.Home, "lib", "wall-pid1-*"))
	if len(inits) != 1 || len(pid1s) != 1 {
		t.Fatalf("kept in %s/lib: inits %v, pid 1s %v (the binary was built without a C compiler?)", p.Home, inits, pid1s)
	}
	if want := strings.Replace(inits[0], "wall-init-", "wall-pid1-", 1); pid1s[0] != want {
		t.Errorf("pid 1 kept as %s, want %s", pid1s[0], want)
	}
	lines := strings.Split(first.Stdout, "\n")
	if want := pid1s[0] + " -dir " + p.Dir + " -- sh -c "; !strings.HasPrefix(lines[0], want) {
		t.Fatalf("the run's pid 1 is %q, want %q and the command", lines[0], want)
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "No such file or directory") {
		t.Errorf("the run sees the records' directory: %q", first.Stdout)
	}
	st, err := os.Stat(pid1s[0])
	if err != nil || st.Mode().Perm() != 0o500 {
		t.Fatalf("kept pid 1: %v %v", st.Mode(), err)
	}
	second := p.exec(t, "run", "--", "sh", "-c", script)
	if second.Code != 0 || !strings.HasPrefix(second.Stdout, pid1s[0]+" ") {
		t.Fatalf("second run: exit %d, pid 1 %q\n%s", second.Code, second.Stdout, second.Stderr)
	}
	if st2, _ := os.Stat(pid1s[0]); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the kept pid 1 was written again for the second run")
	}
	r := p.exec(t, "run", "--", "no-such-command-here")
	if r.Code != 127 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("a command not found: exit %d, want 127 and why\n%s", r.Code, r.Stderr)
	}

}

var (
	plainOnce sync.Once
	plainBin  string
	plainErr  error
)

// A binary built with go build alone has no init attached: its walls
// re-execute it, as they always did, and keep nothing.
func TestWallWithoutAnAttachedInit(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	plainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "postern-plain-")
		if err != nil {
			plainErr = err
			return
		}
		plainBin = filepath.Join(dir, "postern")
		if out, err := exec.Command("go", "build", "-o", plainBin, ".").CombinedOutput(); err != nil {
			plainErr = err
			t.Logf("%s", out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(plainBin)) })
	p := poster{Home: measuredHome(t), Dir: t.TempDir(), Bin: plainBin}
	r := p.exec(t, "run", "--", "sh", "-c", `tr '\0' ' ' < /proc/1/cmdline`)
	if r.Code != 0 || !strings.HasPrefix(strings.TrimSpace(r.Stdout), "/proc/self/exe __wall-init --ports=") {
		t.Fatalf("run: exit %d, pid 1 %q\n%s", r.Code, r.Stdout, r.Stderr)
	}
	if kept, _ := filepath.Glob(filepath.Join(p.Home, "lib", "*")); len(kept) != 0 {
		t.Fatalf("a binary with no init attached kept %v", kept)
	}
}
