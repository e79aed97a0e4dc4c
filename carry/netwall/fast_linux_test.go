package netwall

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/netwall/ownns"
	"github.com/postern-dev/postern/internal/testhosts"
)

// requireFast fails or skips t where root's walls here are not set up by
// postern with the small pid 1 (see fastLane).
func requireFast(t *testing.T) {
	t.Helper()
	testhosts.RequireRoot(t)
	if pid1Path == "" || !SetsUpItself() {
		if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("root's walls are not set up by postern here (pid 1 %q, kernel 6.18 and the init's capabilities: %v), and POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping", pid1Path, SetsUpItself())
		}
		t.Skip("root's walls are set up by the Go init here")
	}
}

// The run's pid 1 is the small one where postern sets the wall up, the Go
// init where asked (InitEnv), and the rest of the wall is the same: what
// TestWall and TestWallFiles check holds for both.
func TestWallPid1(t *testing.T) {
	requireFast(t)
	r := runWalled(t, nil, "sh", "-c", `tr '\0' ' ' </proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], pid1Path+" ") {
		t.Fatalf("exit %d, %q: want pid 1 to be %s", r.code, r.stdout, pid1Path)
	}
	// pid 1, sh, ls, grep: nothing of postern's, whose threads made the
	// run's namespaces, is in its /proc.
	if n := strings.TrimSpace(lines[1]); n != "4" {
		t.Errorf("%s processes in the run's /proc, want 4 (pid 1, sh, ls, grep)", n)
	}

	// pid 1 starts in postern's network namespace and joins the run's
	// before anything of the run starts (see fastProc): the command is in
	// the run's.
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	r = runWalled(t, nil, "readlink", "/proc/self/ns/net")
	if got := strings.TrimSpace(r.stdout); r.code != 0 || got == "" || got == host {
		t.Errorf("the command's network namespace: %q (exit %d), postern's %q: want one of the run's own", got, r.code, host)
	}

	t.Setenv(InitEnv, "go")
	r = runWalled(t, nil, "sh", "-c", `tr '\0' ' ' </proc/1/cmdline`)
	if r.code != 0 || !strings.Contains(r.stdout, InitArg) {
		t.Fatalf("with %s=go: exit %d, pid 1 %q, want the Go init (%s)", InitEnv, r.code, r.stdout, InitArg)
	}
}

// pid 1 is not dumpable: the command, root by uid with no capabilities,
// cannot follow or open its descriptors (the control socket among them),
// read its memory or its environment (it may list the descriptors'
// numbers: /proc/1/fd is root's directory, as it is for the Go init); nor can it reach postern's threads,
// which are in no namespace of the run's.
func TestWallPid1OutOfReach(t *testing.T) {
	requireFast(t)
	r := runWalled(t, nil, "sh", "-c", `
		readlink /proc/1/fd/3 >/dev/null 2>&1 && echo FD-LINK
		( : </proc/1/fd/3 ) 2>/dev/null && echo FD-OPEN
		cat /proc/1/environ >/dev/null 2>&1 && echo ENVIRON
		head -c1 /proc/1/mem >/dev/null 2>&1 && echo MEM
		readlink /proc/1/cwd >/dev/null 2>&1 && echo CWD
		readlink /proc/1/root >/dev/null 2>&1 && echo ROOT
		grep -q . /proc/1/ns/net 2>/dev/null; readlink /proc/1/ns/net >/dev/null 2>&1 && echo NS
		echo done`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "done" {
		t.Errorf("exit %d: the command reached pid 1 through /proc: %q (stderr %q)", r.code, r.stdout, r.stderr)
	}
}

// The same suites, with the Go init: a build without the small pid 1, a
// caller asking for it, and every lane with a user namespace still start it.
func TestWallWithGoInit(t *testing.T) {
	requireFast(t)
	t.Setenv(InitEnv, "go")
	t.Run("wall", TestWall)
	t.Run("files", TestWallFiles)
}

// startPid1 starts the small pid 1 as pid 1 of a new pid namespace, with
// argv after its path, and returns postern's end of its control socket.
func startPid1(t *testing.T, argv ...string) (*pid1Link, *initProc) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	child := os.NewFile(uintptr(fds[1]), "pid1-child")
	defer child.Close()
	link, err := newPid1Link(os.NewFile(uintptr(fds[0]), "pid1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.close)
	proc, err := startProc(pid1Path, append([]string{pid1Path}, argv...), os.Environ(),
		[]*os.File{nil, nil, nil, child}, &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.kill(); proc.wait() })
	return link, proc
}

// pid 1 starts in postern's network namespace, and joins the run's when its
// setup hands it over: a setup without one is refused, and nothing starts,
// so no command ever runs on the host's network.
func TestPid1RefusesASetupWithoutTheRunsNetwork(t *testing.T) {
	requireFast(t)
	link, proc := startPid1(t, "--", "/bin/sh", "-c", "echo RAN")
	if err := link.send(p1Setup, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	h, err := link.recv()
	if err != nil || h.typ != p1Failed || h.a != 5 || syscall.Errno(h.b) != syscall.EBADF {
		t.Fatalf("setup without a network namespace: %+v (%v), want failed at step 5 (EBADF)", h, err)
	}
	// Whatever comes after is not taken: pid 1 has gone.
	_ = link.send(p1Go, 1, 0, goPayload("", nil))
	ws, err := proc.wait()
	if err != nil || ws.ExitStatus() != 125 {
		t.Errorf("pid 1 after a refused setup: %v (%v), want exit 125", ws, err)
	}
}

// The records pid 1 takes in turn: a start before the setup, or a setup
// carrying something else than a network namespace, is refused.
func TestPid1RefusesRecordsOutOfTurn(t *testing.T) {
	requireFast(t)
	link, proc := startPid1(t, "--", "/bin/true")
	if err := link.send(p1Go, 1, 0, goPayload("", nil)); err != nil {
		t.Fatal(err)
	}
	if h, err := link.recv(); err != nil || h.typ != p1Failed || h.a != 1 {
		t.Fatalf("start before setup: %+v (%v), want failed at step 1", h, err)
	}
	if ws, err := proc.wait(); err != nil || ws.ExitStatus() != 125 {
		t.Errorf("pid 1: %v (%v), want exit 125", ws, err)
	}

	link, proc = startPid1(t, "--", "/bin/true")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := link.send(p1Setup, 0, 0, nil, r); err != nil {
		t.Fatal(err)
	}
	if h, err := link.recv(); err != nil || h.typ != p1Failed || h.a != 5 {
		t.Fatalf("setup with a pipe for a network namespace: %+v (%v), want failed at step 5", h, err)
	}
	if ws, err := proc.wait(); err != nil || ws.ExitStatus() != 125 {
		t.Errorf("pid 1: %v (%v), want exit 125", ws, err)
	}
}

// The capabilities postern keeps in a user namespace of its own are the ones
// the wall's set-up holds, no more.
func TestOwnUsernsKeepsTheInitsCaps(t *testing.T) {
	var want uint64
	for _, c := range initCaps {
		want |= 1 << c
	}
	if ownns.Caps != want {
		t.Errorf("ownns.Caps = %#x, initCaps = %#x", ownns.Caps, want)
	}
}

// pid 1's launch mode (carry/netwall/ownns): as a user without privileges it
// makes a user namespace that maps that user's ids alone, keeps the
// capabilities it is given as inheritable and ambient ones, and execs the
// executable it is handed on a descriptor, which the program it execs does
// not get. Where the kernel refuses the namespace (here: a caller in a
// chroot, EPERM) it execs it all the same, as it was.
func TestPid1Launch(t *testing.T) {
	requireFast(t)
	pid1 := filepath.Join(testhosts.OpenDir(t, "postern-launch-"), "pid1")
	if err := testhosts.CopyExecutable(pid1Path, pid1); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open("/bin/sh", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sh := os.NewFile(uintptr(fd), "/bin/sh")
	defer sh.Close()
	caps := strconv.FormatUint(ownns.Caps, 16)
	const script = `cat /proc/self/uid_map; grep -E '^Cap(Eff|Inh|Amb)' /proc/self/status; readlink /proc/$$/fd/3 || echo no-fd-3`
	launch := func(t *testing.T, wrap ...string) []string {
		t.Helper()
		argv := append(wrap, pid1, ownns.LaunchArg, "3", caps, "--", "sh", "-c", script)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{sh}
		if len(wrap) == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", argv, err, out)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		return lines
	}
	want := fmt.Sprintf("%016x", uint64(ownns.Caps))
	got := launch(t)
	if exp := []string{"65534 65534 1", "CapInh: " + want, "CapEff: " + want, "CapAmb: " + want, "no-fd-3"}; !slices.Equal(got, exp) {
		t.Errorf("launched as uid 65534:\n got %q\nwant %q", got, exp)
	}

	// In a chroot (of the same files), the kernel refuses a new user
	// namespace: the executable is exec'd as it was.
	root := t.TempDir()
	wrap := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --rbind / "$0" && exec chroot "$0" setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`, root}
	got = launch(t, wrap...)
	if len(got) < 5 || got[0] != "0 0 4294967295" || got[3] != "CapAmb: 0000000000000000" || got[4] != "no-fd-3" {
		t.Errorf("launched where the namespace is refused: %q, want sh exec'd in the host's namespace, without capabilities", got)
	}

	for _, bad := range [][]string{{"x", caps}, {"3", "zz"}, {"2", caps}} {
		cmd := exec.Command(pid1, ownns.LaunchArg, bad[0], bad[1], "--", "true")
		if out, err := cmd.CombinedOutput(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 125 {
			t.Errorf("-launch %q: %v, want exit 125\n%s", bad, err, out)
		}
	}
}
