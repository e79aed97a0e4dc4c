//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/procstat"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// ptyProc is postern started on a pseudo-terminal of the test's own, as a person
// at a terminal would start it.
type ptyProc struct {
	master *os.File
	cmd    *exec.Cmd
	waited chan struct{}
	err    error

	mu   sync.Mutex
	out  bytes.Buffer
	read chan struct{} // closed when the master reads EIO
}

// startOnPTY runs the built postern as c with args on a new terminal of rows x cols.
func (c *controller) startOnPTY(t *testing.T, rows, cols uint16, args ...string) *ptyProc {
	t.Helper()
	master, slave := openPTY(t, rows, cols)
	p := &ptyProc{master: master, waited: make(chan struct{}), read: make(chan struct{})}
	p.cmd = exec.Command(binFor(t), args...)
	p.cmd.Env = append(c.env(), "TERM=xterm-remote-test")
	p.cmd.Dir = c.Home // not this source tree, which a remote run would take along
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		slave.Close()
		t.Fatal(err)
	}
	slave.Close()
	t.Cleanup(func() {
		select {
		case <-p.waited:
		default:
			p.cmd.Process.Kill()
			<-p.waited
		}
	})
	go func() {
		defer close(p.read)
		b := make([]byte, 4096)
		for {
			k, err := master.Read(b)
			p.mu.Lock()
			p.out.Write(b[:k])
			p.mu.Unlock()
			if err != nil {
				return // EIO once no one holds the slave
			}
		}
	}()
	go func() { p.err = p.cmd.Wait(); close(p.waited) }()
	return p
}

func (p *ptyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until the terminal shows re, or fails the test.
func (p *ptyProc) waitFor(t *testing.T, d time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.waited:
			// One last look: the output may have arrived with the end.
			<-p.read
			if m := re.FindStringSubmatch(p.output()); m != nil {
				return m
			}
			t.Fatalf("postern ended (%v) before the terminal showed %q:\n%s", p.err, re, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %s:\n%s", re, d, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exit waits for postern to end and returns its status.
func (p *ptyProc) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.waited:
	case <-time.After(d):
		// What is still there, here and on the remote (its agent and the
		// run's processes are in the test host's namespaces, not its pid
		// namespace: ps sees them).
		ps, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,sid,tty,stat,wchan:20,etime,args", "--forest").CombinedOutput()
		t.Fatalf("postern did not end within %s:\n%s\nprocesses:\n%s", d, p.output(), ps)
	}
	select {
	case <-p.read:
	case <-time.After(5 * time.Second):
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("postern on a terminal: %v", p.err)
	}
	return 0
}

// TestRemoteTerminal runs a remote command from a terminal: it sees a terminal
// of the person's size and TERM, a resize reaches it, and Ctrl-C typed here
// interrupts it there, with the status saying so.
func TestRemoteTerminal(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	// The same with no wall (--egress-open): the command gets the terminal
	// as its controlling one, in a session of its own on the remote.
	for _, open := range []bool{false, true} {
		name := "walled"
		args := []string{"run", "--machine", "far"}
		if open {
			name = "open"
			args = append(args, "--egress-open", "a terminal test")
		}
		t.Run(name, func(t *testing.T) { remoteTerminal(t, r, args) })
	}
}

func remoteTerminal(t *testing.T, r *remoteLab, args []string) {
	script := `tty; echo "TERM=$TERM"; echo "SIZE $(stty size)"; grep SigIgn /proc/self/status; echo READY
while [ "$(stty size)" = "33 101" ]; do sleep 0.05; done
echo "RESIZED $(stty size)"; sleep 100; echo "NOT INTERRUPTED"`
	p := r.C.startOnPTY(t, 33, 101, append(args, "--", "sh", "-c", script)...)
	p.waitFor(t, 30*time.Second, regexp.MustCompile(`READY`))
	out := p.output()
	if !regexp.MustCompile(`/dev/pts/\d+`).MatchString(out) || !strings.Contains(out, "SIZE 33 101") || !strings.Contains(out, "TERM=xterm-remote-test") {
		t.Fatalf("the remote run did not see a terminal of 33x101 with the person's TERM:\n%s", out)
	}
	// The command starts with SIGINT and SIGTERM at their default, whatever
	// the agent's own were when it started it (ignored, until its relay
	// has them).
	if m := regexp.MustCompile(`SigIgn:\s*([0-9a-f]+)`).FindStringSubmatch(out); m == nil {
		t.Errorf("no SigIgn line:\n%s", out)
	} else if ign, err := strconv.ParseUint(m[1], 16, 64); err != nil || ign&(1<<(syscall.SIGINT-1)|1<<(syscall.SIGTERM-1)) != 0 {
		t.Errorf("the remote command ignores SIGINT or SIGTERM (SigIgn %s): a Ctrl-C typed here would not end it", m[1])
	}
	// The person's window grows: the kernel tells postern, postern tells the agent.
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 120}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, 10*time.Second, regexp.MustCompile(`RESIZED 41 120`))
	// Give sleep a moment to start, then type Ctrl-C.
	time.Sleep(200 * time.Millisecond)
	typed := time.Now()
	if _, err := p.master.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	code := p.exit(t, 10*time.Second)
	t.Logf("Ctrl-C ended the remote run in %s", time.Since(typed).Round(time.Millisecond))
	if code != 130 || strings.Contains(p.output(), "NOT INTERRUPTED") {
		t.Fatalf("after Ctrl-C postern exited %d, want 130 (interrupted):\n%s", code, p.output())
	}
	run := lastRun(t, r.C)
	if run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 130 || run.Why != "ended by signal interrupt" {
		t.Fatalf("run record after Ctrl-C: %+v", run)
	}
}

// runNamespaces are the namespaces of pid that are not host's (a process of
// the machine it runs on), as their /proc links ("net:[4026532...]").
func runNamespaces(t *testing.T, pid, host int) []string {
	t.Helper()
	var out []string
	for _, ns := range []string{"net", "user", "mnt", "pid", "ipc", "uts", "cgroup"} {
		mine, err := os.Readlink("/proc/" + strconv.Itoa(host) + "/ns/" + ns)
		if err != nil {
			continue
		}
		theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
		if err != nil {
			t.Fatalf("namespaces of the run's process %d: %v", pid, err)
		}
		if theirs != mine {
			out = append(out, theirs)
		}
	}
	return out
}

// nsHolders lists the processes that are in, or hold a descriptor of, any of
// the namespaces and that were already there at bornBy (clock ticks since
// boot, see sinceBoot). A namespace's number is the kernel's to give again
// once it is gone: a process started after the run was stopped, in a new
// namespace of another test's, may show the same one. A process the run
// left behind was there before.
func nsHolders(namespaces []string, bornBy uint64) []string {
	want := map[string]bool{}
	for _, n := range namespaces {
		want[n] = true
	}
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if born := procstat.StartTime(pid); born == 0 || born > bornBy {
			continue // gone, or started since
		}
		dir := "/proc/" + p.Name()
		var links []string
		if nss, err := os.ReadDir(dir + "/ns"); err == nil {
			for _, n := range nss {
				links = append(links, dir+"/ns/"+n.Name())
			}
		}
		if fds, err := os.ReadDir(dir + "/fd"); err == nil {
			for _, f := range fds {
				links = append(links, dir+"/fd/"+f.Name())
			}
		}
		for _, l := range links {
			if dst, err := os.Readlink(l); err == nil && want[dst] {
				comm, _ := os.ReadFile(dir + "/comm")
				out = append(out, p.Name()+" ("+strings.TrimSpace(string(comm))+") "+l+" -> "+dst)
				break
			}
		}
	}
	return out
}

// sinceBoot is now in clock ticks since boot (USER_HZ, 100 a second), as
// processes' start times are counted.
func sinceBoot(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	secs, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(secs*100) + 1 // rounded up: a process started this tick counts
}

// pgrepPids lists the pids of processes whose command line matches pattern.
func pgrepPids(t *testing.T, pattern string) []int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", pattern).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil
	}
	if err != nil {
		t.Fatalf("pgrep: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// sshdTree lists root and every sshd process under it (the per-connection
// session processes), not what those run (the agent).
func sshdTree(root int) []int {
	children := map[int][]int{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if c := strings.TrimSpace(string(comm)); c != "sshd" && pid != root {
			return
		}
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	walk(root)
	return out
}

// TestRemoteConnectionDropped cuts a remote run's connection two ways while the
// controller lives: sshd is killed (the connection closes), and the network
// stops carrying it (silence). Each time the agent kills the run and tears its
// wall down within 5 seconds, leaving no process or namespace of the run, and
// the controller marks the run lost and says so.
func TestRemoteConnectionDropped(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")

	drop := func(t *testing.T, how string, cut func(t *testing.T)) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		pattern := "^sleep 300." + marker + "$" // the run's own sleep, not the command lines naming it
		cmd := exec.Command(binFor(t), "run", "--machine", "far", "--", "sh", "-c", "sleep 300."+marker+"; echo NOT-KILLED")
		cmd.Env = r.C.env()
		cmd.Dir = r.C.Dir // not this source tree, which a remote run would take along
		stdout, stderr, waited := startBackground(t, cmd)
		var pids []int
		waitUntil(t, 20*time.Second, "the remote run to start", func() bool { pids = pgrepPids(t, pattern); return len(pids) > 0 })
		namespaces := runNamespaces(t, pids[0], r.Remote.cmd.Process.Pid)
		if !slices.ContainsFunc(namespaces, func(n string) bool { return strings.HasPrefix(n, "net:") }) {
			t.Fatalf("the run's process %d is in the remote's own network namespace: no wall? (its own: %v)", pids[0], namespaces)
		}
		// This test's agents only (under its temporary directory): other
		// tests' agents run beside it.
		labRoot := filepath.Dir(filepath.Dir(r.Remote.Home)) + "/"
		var agents []int
		for _, pid := range pgrepPids(t, "__agent serve") {
			if cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.HasPrefix(string(cl), labRoot) {
				agents = append(agents, pid)
			}
		}
		if len(agents) == 0 {
			out, _ := exec.Command("sh", "-c", "for p in $(pgrep -f '__agent serve'); do tr '\\0' ' ' < /proc/$p/cmdline; echo; done").CombinedOutput()
			t.Fatalf("no agent of this test (under %s) found while the run runs:\n%s", labRoot, out)
		}

		cut(t)
		cutAt, cutTicks := time.Now(), sinceBoot(t)
		for len(pgrepPids(t, pattern)) > 0 {
			if time.Since(cutAt) > 5*time.Second {
				out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,etime,args").Output()
				t.Fatalf("5s after the connection %s, the run is still there:\n%s", how, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for len(nsHolders(namespaces, cutTicks)) > 0 {
			if time.Since(cutAt) > 5*time.Second {
				t.Fatalf("5s after the connection %s, the run's namespaces %v are still held:\n%s", how, namespaces, strings.Join(nsHolders(namespaces, cutTicks), "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		gone := time.Since(cutAt)
		for _, pid := range agents {
			if alive(pid) {
				for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
					if !alive(pid) {
						break
					}
					if time.Now().After(deadline) {
						out, _ := exec.Command("sh", "-c", "cat /proc/"+strconv.Itoa(pid)+"/cmdline | tr '\\0' ' '; echo; ls -l /proc/"+strconv.Itoa(pid)+"/fd; cat /proc/"+strconv.Itoa(pid)+"/task/*/wchan").CombinedOutput()
						t.Fatalf("the agent %d is still there 1s after the run ended:\n%s", pid, out)
					}
				}
			}
		}
		t.Logf("connection %s: the run and its wall were gone %s later", how, gone.Round(time.Millisecond))

		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Fatalf("postern still runs 10s after the connection %s:\n%s", how, stderr.String())
		}
		code := cmd.ProcessState.ExitCode()
		msg := stderr.String()
		if code == 0 || !strings.Contains(msg, "lost") || !strings.Contains(msg, `"far"`) || strings.Contains(stdout.String(), "NOT-KILLED") {
			t.Fatalf("postern after the connection %s: exit %d, stderr %q, stdout %q; want non-zero and a message that the run on far was lost", how, code, msg, stdout.String())
		}
		run := lastRun(t, r.C)
		if run.State != records.StateLost || run.ExitCode != nil || !strings.Contains(run.Why, "far") {
			t.Fatalf("run record after the connection %s: %+v", how, run)
		}
		t.Logf("postern said: %s", strings.TrimSpace(msg))
	}

	t.Run("SSHDKilled", func(t *testing.T) {
		drop(t, "closed", func(t *testing.T) {
			for _, pid := range sshdTree(r.Remote.cmd.Process.Pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	})
	// sshd was killed: start another for the next case.
	r.Remote = startSSHD(t, r.Remote.Host, r.Remote.Addr, r.C.Pub)
	r.C.trust(t, r.Remote.Addr.String(), r.Remote.HostPub)
	t.Run("NetworkSilent", func(t *testing.T) {
		drop(t, "went silent", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Both directions of ssh stop at the remote, without a reset.
			rules := `table inet posterndrop {
  chain in { type filter hook input priority -10; tcp dport 22 drop; }
  chain out { type filter hook output priority -10; tcp sport 22 drop; }
}`
			nft := r.Remote.Command(ctx, "nft", "-f", "-")
			nft.Stdin = strings.NewReader(rules)
			if out, err := nft.CombinedOutput(); err != nil {
				t.Fatalf("nft in the remote: %v: %s", err, out)
			}
		})
	})
}

// alive reports whether pid is a process that has not exited (a zombie has:
// it only waits for its parent to reap it).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestRemoteInventoryImportAndProbeAll imports machines from an HCL inventory
// (they stay unmeasured, and runs on them are refused), rejects a bad inventory
// with the place of the mistake, and measures every machine at once.
func TestRemoteInventoryImportAndProbeAll(t *testing.T) {
	testhosts.EndToEnd(t)
	lab := testhosts.NewTestLab(t, "inv")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newController(t)
	hosts := map[string]*sshHost{}
	for _, name := range []string{"alpha", "beta"} {
		h, err := lab.Host(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		hosts[name] = startSSHD(t, h, h.Addr, c.Pub)
		c.trust(t, h.Addr.String(), hosts[name].HostPub)
	}
	// gamma is a host where nothing listens for ssh.
	gamma, err := lab.Host(ctx, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	c.writeSSH(t, "config", fmt.Sprintf("Host alpha-alias\n  HostName %s\n  User root\n", hosts["alpha"].Addr))

	// A bad inventory is refused whole, with file:line:col, and adds nothing.
	for _, bad := range []struct{ src, at string }{
		{"machine \"ok\" {\n  ssh = \"root@10.0.0.1\"\n}\nmachine \"broken\" {\n  ssh = \n}\n", ":5:"},
		{"machine \"ok\" {\n  ssh = \"root@10.0.0.1\"\n}\n\nmachine \"Bad Name\" {\n  ssh = \"x\"\n}\n", ":5:1"},
		{"machine \"ok\" {\n  ssh = \"root@10.0.0.1\"\n}\nmachine \"ok\" {\n  ssh = \"root@10.0.0.2\"\n}\n", ":4:1"},
	} {
		file := writeFile(t, "bad.hcl", bad.src)
		stdout, stderr, code := c.postern(t, "machine", "import", file)
		if code != 2 || !strings.Contains(stderr, file+bad.at) {
			t.Fatalf("import of a bad inventory:\n%s\nexit %d, stderr %q, stdout %q; want 2 and %s%s", bad.src, code, stderr, stdout, file, bad.at)
		}
	}
	if out := c.mustPostern(t, "machine", "list"); strings.Contains(out, "ok") {
		t.Fatalf("a refused inventory added machines:\n%s", out)
	}

	inv := writeFile(t, "machines.hcl", fmt.Sprintf(`
machine "alpha" {
  ssh    = "alpha-alias"
  labels = { role = "build" }
}
machine "beta" {
  ssh      = "root@%s"
  identity = "~/.ssh/id_ed25519"
}
machine "gamma" {
  ssh = "root@%s"
}
`, hosts["beta"].Addr, gamma.Addr))
	out := c.mustPostern(t, "machine", "import", inv)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if !regexp.MustCompile(`(?m)^` + name + `\t\S+\tadded$`).MatchString(out) {
			t.Fatalf("import did not add %s:\n%s", name, out)
		}
	}
	views := machineViews(t, c)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		v, ok := views[name]
		if !ok || v.Measured || v.Carry != "none" || v.Lane != "remote-linux" {
			t.Fatalf("imported machine %s: %+v (present %v); want unmeasured, carry none, lane remote-linux", name, v, ok)
		}
		_, stderr, code := c.postern(t, "run", "--machine", name, "--", "true")
		if code != exitRefused || !strings.Contains(stderr, "EGRESS-CLOSED-DEFAULT-REFUSED") || !strings.Contains(stderr, "never measured") {
			t.Fatalf("run on unmeasured %s: exit %d, stderr %q; want 77 and the refusal", name, code, stderr)
		}
	}
	if views["alpha"].Labels["role"] != "build" {
		t.Fatalf("alpha's labels: %v", views["alpha"].Labels)
	}

	// Every machine at once: one line as each starts and one as each ends.
	start := time.Now()
	_, stderr, code := c.postern(t, "machine", "probe-confinement", "--all")
	took := time.Since(start)
	if code == 0 || !strings.Contains(stderr, "gamma") {
		t.Fatalf("probe --all with gamma unreachable: exit %d, stderr:\n%s; want failure naming gamma", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	index := func(re string) int {
		for i, l := range lines {
			if regexp.MustCompile(re).MatchString(l) {
				return i
			}
		}
		t.Fatalf("probe --all printed no line matching %q:\n%s", re, stderr)
		return -1
	}
	firstEnd := len(lines) // of the remote machines that can be measured
	for _, name := range []string{"local", "alpha", "beta", "gamma"} {
		s := index(`^postern: measuring ` + name + ` …$`)
		verb := "measured in"
		if name == "gamma" {
			verb = "failed after"
		}
		e := index(`^postern: ` + name + `: ` + verb + ` \S+($|: )`)
		if s > e {
			t.Fatalf("%s ended before it started:\n%s", name, stderr)
		}
		if name == "alpha" || name == "beta" {
			firstEnd = min(firstEnd, e)
		}
	}
	// Both remotes started before either ended: they were measured concurrently.
	for _, name := range []string{"alpha", "beta"} {
		if index(`^postern: measuring `+name+` …$`) > firstEnd {
			t.Fatalf("%s started after another machine's measurement ended: not concurrent:\n%s", name, stderr)
		}
	}
	index(`^postern: gamma: failed after \S+: .*connection refused`)
	index(`^postern: 1 of 4 machines could not be measured: gamma`)
	t.Logf("probe --all took %s:\n%s", took.Round(time.Millisecond), stderr)
	views = machineViews(t, c)
	for _, name := range []string{"alpha", "beta"} {
		if v := views[name]; !v.Measured || v.Carry != "network-wall" {
			t.Fatalf("%s after probe --all: %+v; want measured, network-wall", name, v)
		}
		if got := c.mustPostern(t, "run", "--machine", name, "--", "cat", "/proc/sys/kernel/hostname"); strings.TrimSpace(got) == "" {
			t.Fatalf("run on %s printed nothing", name)
		}
		if len(agentFiles(t, hosts[name].Home)) != 1 {
			t.Fatalf("no agent installed on %s", name)
		}
	}
	if v := views["gamma"]; v.Measured {
		t.Fatalf("gamma has a record although it could not be reached: %+v", v)
	}
}

func machineViews(t *testing.T, c *controller) map[string]machineView {
	t.Helper()
	out := c.mustPostern(t, "machine", "list", "--json")
	var vs []machineView
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("machine list --json: %v: %s", err, out)
	}
	m := map[string]machineView{}
	for _, v := range vs {
		m[v.Name] = v
	}
	return m
}

// startSSHAgent runs an OpenSSH ssh-agent for the test holding key, and
// returns its socket.
func startSSHAgent(t *testing.T, key string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command("ssh-agent", "-D", "-a", sock)
	var log lockedLog
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-waited })
	waitUntil(t, 5*time.Second, "ssh-agent's socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	add := exec.Command("ssh-add", key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add %s: %v: %s (agent: %s)", key, err, out, log.String())
	}
	return sock
}

// TestRemoteSSHAgent logs in with a key that only the ssh agent holds: no
// IdentityFile in the config and no key file in ~/.ssh.
func TestRemoteSSHAgent(t *testing.T) {
	testhosts.EndToEnd(t)
	lab := testhosts.NewTestLab(t, "agent")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newController(t)
	h, err := lab.Host(ctx, "far")
	if err != nil {
		t.Fatal(err)
	}
	s := startSSHD(t, h, h.Addr, c.Pub)
	c.trust(t, h.Addr.String(), s.HostPub)
	// The key leaves ~/.ssh: only the agent will have it.
	key := filepath.Join(t.TempDir(), "agent-only")
	if err := os.Rename(c.Key, key); err != nil {
		t.Fatal(err)
	}
	os.Remove(c.Key + ".pub")
	c.writeSSH(t, "config", fmt.Sprintf("Host far-alias\n  HostName %s\n  User root\n", h.Addr))
	c.mustPostern(t, "machine", "add", "far", "--ssh", "far-alias")

	// Without an agent there is no key, and the message says how to give one.
	_, stderr, code := c.postern(t, "machine", "probe-confinement", "far")
	if code == 0 || !strings.Contains(stderr, "ssh-agent") || !strings.Contains(stderr, "ssh-add") {
		t.Fatalf("probe with no key at all: exit %d, stderr %q; want a refusal naming ssh-agent and ssh-add", code, stderr)
	}

	c.Env = []string{"SSH_AUTH_SOCK=" + startSSHAgent(t, key)}
	c.mustPostern(t, "machine", "probe-confinement", "far")
	if out := c.mustPostern(t, "run", "--machine", "far", "--", "echo", "through the agent's key"); out != "through the agent's key\n" {
		t.Fatalf("run with the agent's key printed %q", out)
	}
}
