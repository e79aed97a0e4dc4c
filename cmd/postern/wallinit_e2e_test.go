//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/netwall/ownns"
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

// A user without privileges gets the wall set up by postern itself too (the
// machine's measure keeps the small pid 1 for the build): postern
// enters a user namespace of its own before anything else of it runs, where
// it holds the wall's capabilities and nothing of the host's
// (carry/netwall/ownns). The run sees the caller's uid and no capability, in
// a user namespace of its own below postern's; postern's threads hold no
// more than the wall's capabilities, none of them inheritable or ambient but
// on the thread that starts pid 1; what the caller passed
// (descriptors, exit status) passes as before; POSTERN_WALL_INIT=go and a
// terminal on stdin keep the Go init in a user namespace of its own.
func TestWallUnprivilegedSetsUpItself(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	if !netwall.SetsUpItself() || !smallPid1 {
		t.Skip("postern does not set walls up itself here (a kernel before 6.18, or no small pid 1): they start the Go init")
	}
	t.Parallel()
	p, _, work := nobodyPoster(t)
	if r := p.exec(t, "machine", "probe-confinement"); r.Code != 0 {
		t.Fatalf("probe-confinement as uid %d: exit %d\n%s", nobody, r.Code, r.Stderr)
	}
	const script = `tr '\0' ' ' < /proc/1/cmdline; echo; id -u; grep '^Cap' /proc/self/status; cat /proc/self/uid_map; env | grep -c ^POSTERN_OWN_USERNS=; exit 7`
	pid1s, _ := filepath.Glob(filepath.Join(p.Home, "lib", "wall-pid1-*"))
	if len(pid1s) != 1 {
		t.Fatalf("measuring the machine kept no small pid 1 in %s/lib: %v", p.Home, pid1s)
	}

	first := p.exec(t, "run", "--", "sh", "-c", script)
	lines := strings.Split(first.Stdout, "\n")
	if first.Code != 7 || len(lines) < 9 {
		t.Fatalf("run as uid %d: exit %d, want 7\n%s\n%s", nobody, first.Code, first.Stdout, first.Stderr)
	}
	if want := pid1s[0] + " -dir " + work + " -nproc "; !strings.HasPrefix(lines[0], want) {
		t.Errorf("the run's pid 1 is %q, want %q…: not set up by postern itself", lines[0], want)
	}
	if lines[1] != strconv.Itoa(nobody) {
		t.Errorf("the run's uid is %q, want %d", lines[1], nobody)
	}
	for _, l := range lines[2:7] {
		if f := strings.Fields(l); len(f) != 2 || strings.Trim(f[1], "0") != "" {
			t.Errorf("the run holds a capability: %q", l)
		}
	}
	if f := strings.Fields(lines[7]); len(f) != 3 || f[0] != strconv.Itoa(nobody) || f[1] != strconv.Itoa(nobody) || f[2] != "1" {
		t.Errorf("the run's uid_map is %q, want the caller's uid alone", lines[7])
	}
	if lines[8] != "0" {
		t.Errorf("the run's environment has %s", ownns.Env)
	}

	// The run's processes alone count against its limit: postern's threads,
	// in postern's user namespace, do not take from it.
	pids := p.exec(t, "run", "--pids-limit", "24", "--", "sh", "-c", `for i in $(seq 18); do sleep 5 & done; jobs -p > started; wc -l < started; kill $(cat started)`)
	if pids.Code != 0 || strings.TrimSpace(pids.Stdout) != "18" {
		t.Errorf("18 processes under --pids-limit 24 as uid %d: exit %d, %q started\n%s", nobody, pids.Code, pids.Stdout, pids.Stderr)
	}

	// While a run goes on: postern in its own user namespace, its threads
	// holding the wall's capabilities at most, ambient ones on one thread
	// at most (the forker, which starts pid 1).
	live := p.start(t, "run", "--", "sh", "-c", "readlink /proc/self/ns/user > userns; touch up; sleep 30")
	pid := live.cmd.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(work, "up")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start within 30s")
		}
	}
	if m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid)); strings.Join(strings.Fields(string(m)), " ") != fmt.Sprintf("%d %d 1", nobody, nobody) {
		t.Errorf("postern's uid_map during the run: %q", m)
	}
	// The run has a user namespace of its own below postern's, where its
	// processes alone count against RLIMIT_NPROC.
	runNS, _ := os.ReadFile(filepath.Join(work, "userns"))
	if ours, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err != nil || strings.TrimSpace(string(runNS)) == ours || len(runNS) == 0 {
		t.Errorf("the run's user namespace %q, postern's %q (%v): want one of the run's own", runNS, ours, err)
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	ambient := 0
	for _, task := range tasks {
		data, err := os.ReadFile(task)
		if err != nil {
			continue // ended meanwhile
		}
		for _, l := range strings.Split(string(data), "\n") {
			name, hex, ok := strings.Cut(l, ":\t")
			if !ok || !strings.HasPrefix(name, "Cap") || name == "CapBnd" {
				continue
			}
			v, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatalf("%s: %q", task, l)
			}
			if v&^ownns.Caps != 0 {
				t.Errorf("a thread of postern's holds more than the wall's capabilities: %s %s in %s", name, hex, task)
			}
			if (name == "CapAmb" || name == "CapInh") && v != 0 {
				ambient++ // counted twice on the forker: once each
			}
		}
	}
	if len(tasks) == 0 || ambient > 2 {
		t.Errorf("postern's threads: %d, with %d inheritable or ambient sets not empty (at most the forker's two)", len(tasks), ambient)
	}
	_ = live.cmd.Process.Signal(syscall.SIGTERM)
	if r := live.wait(t); r.Code != 143 {
		t.Errorf("a run stopped by SIGTERM: exit %d, want 143\n%s", r.Code, r.Stderr)
	}

	// A descriptor the caller passed (a policy on /dev/fd/3) survives the
	// launch's two execs.
	pol, err := os.CreateTemp("", "postern-policy-*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pol.Name())
	if err := pol.Chmod(0o644); err != nil { // /dev/fd/3 opens the file again, as nobody
		t.Fatal(err)
	}
	if _, err := pol.WriteString("mode = \"enforce\"\nallow = [\"nothing-allowed.test\"]\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := pol.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := p.command(ctx, "run", "--policy", "/dev/fd/3", "--", "cat", "/proc/1/comm")
	cmd.ExtraFiles = []*os.File{pol}
	out, err := cmd.CombinedOutput()
	pol.Close()
	if err != nil || !strings.Contains(string(out), "wall-pid1-") {
		t.Errorf("run --policy /dev/fd/3 as uid %d: %v\n%s", nobody, err, out)
	}

	// The Go init where it is asked for, or where the run has a terminal
	// (script(1) gives postern one on every stream).
	goInit := p
	goInit.Env = append(slices.Clone(p.Env), "POSTERN_WALL_INIT=go")
	if r := goInit.exec(t, "run", "--", "sh", "-c", script); r.Code != 7 || !strings.Contains(r.Stdout, " __wall-init ") {
		t.Errorf("POSTERN_WALL_INIT=go as uid %d: exit %d, want 7 from the Go init\n%s\n%s", nobody, r.Code, r.Stdout, r.Stderr)
	}
	term := p.command(ctx, "")
	term.Path, term.Args = "/usr/bin/script", []string{"script", "-qec", p.Bin + " run -- sh -c 'cat /proc/1/comm; exit 7'", "/dev/null"}
	if out, err := term.CombinedOutput(); !strings.Contains(string(out), "wall-init-") {
		t.Errorf("a run with a terminal as uid %d: %v\n%s", nobody, err, out)
	}
}
