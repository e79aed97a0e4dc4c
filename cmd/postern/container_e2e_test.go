//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry/container"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/probe/rung"
	"github.com/postern-dev/postern/records"
)

// The container bridge end to end: a static postern (the harness must run in a
// busybox image), podman, an image imported from Debian's static busybox, and
// the lab's hosts as the outside world.

var (
	ctrOnce  sync.Once
	ctrBin   string // postern built with CGO_ENABLED=0
	ctrImage string // the busybox image
	ctrHome  string // a POSTERN_HOME where local was measured by ctrBin
	ctrProbe probe.Rung
	ctrErr   error
	ctrSkip  string
)

// ctrBusybox is Debian's busybox-static; ctrApplets are linked in the image.
const ctrBusybox = "/bin/busybox"

var ctrApplets = []string{"sh", "cat", "echo", "sleep", "true", "false", "nc", "wget", "tftp", "nslookup", "ip", "ls", "id", "trap", "kill", "sha256sum", "rm", "cp", "chmod"}

// ctrSetup builds the static binary and the image and measures local once.
func ctrSetup(t *testing.T) {
	t.Helper()
	testhosts.RequireRoot(t)
	ctrOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := os.Stat(ctrBusybox); err != nil {
			ctrSkip = fmt.Sprintf("needs busybox-static (%s): %v", ctrBusybox, err)
			return
		}
		eng, err := container.Detect(ctx, container.Podman)
		if err != nil {
			ctrSkip = fmt.Sprintf("needs podman: %v", err)
			return
		}
		dir := filepath.Join(binDirOf(binFor(t)), "container")
		if ctrErr = os.MkdirAll(dir, 0o755); ctrErr != nil {
			return
		}
		ctrBin = filepath.Join(dir, "postern")
		build := exec.CommandContext(ctx, "go", "build", "-o", ctrBin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			ctrErr = fmt.Errorf("build a static postern: %v\n%s", err, out)
			return
		}
		if ctrImage, ctrErr = container.BuildImage(ctx, eng, "postern-e2e-busybox", ctrImageFiles()); ctrErr != nil {
			return
		}
		ctrHome = filepath.Join(dir, "home")
		if ctrErr = os.MkdirAll(ctrHome, 0o700); ctrErr != nil {
			return
		}
		cmd := exec.CommandContext(ctx, ctrBin, "machine", "probe-confinement", "--json")
		cmd.Env = append(ctrEnv(), "POSTERN_HOME="+ctrHome)
		out, err := cmd.CombinedOutput()
		if err != nil {
			ctrErr = fmt.Errorf("postern machine probe-confinement: %v\n%s", err, out)
			return
		}
		var v struct {
			Rungs map[rung.Name]probe.Rung `json:"rungs"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			ctrErr = fmt.Errorf("probe-confinement --json: %v\n%s", err, out)
			return
		}
		ctrProbe = v.Rungs[probe.RungContainer]
	})
	if ctrSkip != "" {
		if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("%s (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping)", ctrSkip)
		}
		t.Skip(ctrSkip)
	}
	if ctrErr != nil {
		t.Fatal(ctrErr)
	}
}

// ctrImageFiles are the test image's files: static busybox and its applets.
func ctrImageFiles() []container.ImageFile {
	files := append(container.ProbeFiles(), container.ImageFile{Path: "bin/busybox", Source: ctrBusybox, Mode: 0o755})
	for _, a := range ctrApplets {
		files = append(files, container.ImageFile{Path: "bin/" + a, Link: "busybox"})
	}
	return files
}

// ctrEnv is the environment of the tests' postern: no proxies, and a cache
// directory of the tests' own (postern remembers container engines there).
func ctrEnv() []string {
	return append(curlEnv(), "XDG_CACHE_HOME="+filepath.Join(binDirOf(posternBin), "container", "cache"))
}

func binDirOf(p string) string { return filepath.Dir(p) }

// ctrHomeCopy is a POSTERN_HOME of the test's own holding the measured record.
func ctrHomeCopy(t *testing.T) string {
	t.Helper()
	return homeCopy(t, ctrHome)
}

// ctrRun is one finished 'postern run'.
type ctrRun struct {
	Stdout, Stderr string
	Code           int
}

func ctrPostern(t *testing.T, home string, args ...string) ctrRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrBin, args...)
	cmd.Env = append(ctrEnv(), "POSTERN_HOME="+home)
	var r ctrRun
	r.Stdout, r.Stderr, r.Code = runToEnd(t, cmd)
	return r
}

// ctrRecord is the only run recorded in home.
func ctrRecord(t *testing.T, home string) records.Run {
	t.Helper()
	r := ctrPostern(t, home, "runs", "list", "--json")
	var runs []records.Run
	if err := json.Unmarshal([]byte(r.Stdout), &runs); err != nil || len(runs) != 1 {
		t.Fatalf("runs list: %v, %d runs:\n%s%s", err, len(runs), r.Stdout, r.Stderr)
	}
	return runs[0]
}

func ctrEvents(t *testing.T, home, id string) []door.Event {
	t.Helper()
	r := ctrPostern(t, home, "runs", "events", id, "--json")
	var evs []door.Event
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if line == "" {
			continue
		}
		var ev door.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// podmanNames lists the containers carrying label (KEY or KEY=VALUE).
func podmanNames(t *testing.T, label string) []string {
	t.Helper()
	out, err := exec.Command("podman", "ps", "--all", "--format", "{{.Names}}", "--filter", "label="+label).CombinedOutput()
	if err != nil {
		t.Fatalf("podman ps: %v: %s", err, out)
	}
	return strings.Fields(string(out))
}

var ctrSectionRE = regexp.MustCompile(`(?m)^== (\S+) rc=(\d+)$`)

// ctrStep runs a shell command in the container's script and reports its exit
// status as "== NAME rc=N" on stdout.
func ctrStep(name, command string) string {
	return fmt.Sprintf("%s >/tmp/%s.out 2>&1; echo \"== %s rc=$?\"; cat /tmp/%s.out; ", command, name, name, name)
}

func ctrStatuses(t *testing.T, out string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, s := range ctrSectionRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(s[2])
		m[s[1]] = n
	}
	return m
}

func TestContainerRungMeasured(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	g := ctrProbe
	if g.Result != probe.Yes || !strings.HasPrefix(g.Detail, "podman ") ||
		!strings.Contains(g.Detail, "192.0.2.1:443 inside a throwaway container reached the door") {
		t.Fatalf("container rung %+v, want yes naming podman and the round trip", g)
	}
	// Other packages' tests may have containers of their own up for a
	// moment; one the probe left would stay.
	if !eventuallyTrue(15*time.Second, func() bool { return len(podmanNames(t, container.LabelRun)) == 0 }) {
		t.Errorf("containers left after the probe: %v", podmanNames(t, container.LabelRun))
	}
}

func TestContainerRunIsWalled(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	l := newE2ELab(t)
	ctx := context.Background()
	// A TCP port outside the policy on the allowed host, and a UDP port on the
	// other host: each counts what reaches it.
	var tcpHits, udpHits sync.Map
	tl, err := l.Web.Listen(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			tcpHits.Store(c.RemoteAddr().String(), true)
			c.Close()
		}
	}()
	pc, err := l.Other.ListenPacket(ctx, 9999)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			udpHits.Store(from.String(), string(buf[:n]))
		}
	}()
	// The UDP listener hears what is sent from outside the wall.
	control, err := net.Dial("udp", fmt.Sprintf("%s:9999", l.Other.Addr))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = control.Write([]byte("control"))
	control.Close()
	if !eventuallyTrue(3*time.Second, func() bool { n := 0; udpHits.Range(func(_, _ any) bool { n++; return false }); return n > 0 }) {
		t.Fatal("the UDP listener heard nothing from the host: the test cannot tell a wall from a broken listener")
	}
	udpHits.Clear()

	policy := writeFile(t, "policy.hcl", l.policyFor("enforce", []string{"web.test"}, nil))
	home := ctrHomeCopy(t)
	script := ctrStep("allowed", "wget -q -O- http://web.test/allowed") +
		ctrStep("forbidden", "wget -q -O- http://inside.test/forbidden") +
		ctrStep("literal", fmt.Sprintf("wget -q -O- http://%s/literal", l.Other.Addr)) +
		ctrStep("port", fmt.Sprintf("nc -w 3 %s 8080 </dev/null", l.Web.Addr)) +
		ctrStep("udp", fmt.Sprintf("tftp -g -r probe -l /tmp/probe %s 9999", l.Other.Addr)) +
		"exit 42"
	r := ctrPostern(t, home, "run", "--policy", policy, l.Resolver(), "--container", ctrImage, "--", "sh", "-c", script)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	if r.Code != 42 {
		t.Errorf("postern exited %d, want the run's 42", r.Code)
	}
	st := ctrStatuses(t, r.Stdout)
	if st["allowed"] != 0 || !strings.Contains(r.Stdout, `"served_by":"web"`) || !strings.Contains(r.Stdout, `"uri":"/allowed"`) {
		t.Errorf("allowed name not reached (rc %d)", st["allowed"])
	}
	for _, name := range []string{"forbidden", "literal", "port", "udp"} {
		if rc, ok := st[name]; !ok || rc == 0 {
			t.Errorf("step %s: rc %d (ran: %v), want a failure", name, rc, ok)
		}
	}
	if strings.Contains(r.Stdout, `"served_by":"other"`) {
		t.Errorf("the other host was reached")
	}
	if l.DNS.Asked("inside.test") {
		t.Errorf("the forbidden name was resolved upstream")
	}
	tcpHits.Range(func(k, _ any) bool { t.Errorf("port 8080 outside the policy was reached from %v", k); return true })
	time.Sleep(200 * time.Millisecond)
	udpHits.Range(func(k, v any) bool {
		t.Errorf("UDP from inside the wall reached the other host from %v: %q", k, v)
		return true
	})

	run := ctrRecord(t, home)
	if run.Lane != "local-container" || run.Carry != "container-bridge" || run.State != records.StateExited ||
		run.ExitCode == nil || *run.ExitCode != 42 || run.Allowed < 1 || run.Denied < 2 {
		t.Errorf("run record %+v", run)
	}
	evs := ctrEvents(t, home, run.ID)
	var allowWeb, denyInside, denyLiteral, wallPort, wallUDP bool
	for _, ev := range evs {
		switch {
		case ev.Event == "decision" && ev.Host == "web.test" && ev.Decision == "allow":
			allowWeb = true
		case ev.Event == "decision" && ev.Host == "inside.test" && ev.Decision == "deny":
			denyInside = true
		case ev.Event == "decision" && ev.Kind == "transparent" && ev.Host == l.Other.Addr.String() && ev.Decision == "deny":
			denyLiteral = true
		case ev.Kind == "wall" && ev.Host == l.Web.Addr.String() && ev.Port == 8080 && ev.Decision == "deny":
			wallPort = true
		case ev.Kind == "wall" && ev.Host == l.Other.Addr.String() && ev.Port == 9999 && strings.Contains(ev.Reason, "udp"):
			wallUDP = true
		}
	}
	if !allowWeb || !denyInside || !denyLiteral || !wallPort || !wallUDP {
		t.Errorf("events: allow web.test %v, deny inside.test %v, deny %s %v, the wall's refusals of tcp 8080 %v and udp 9999 %v; events %+v",
			allowWeb, denyInside, l.Other.Addr, denyLiteral, wallPort, wallUDP, evs)
	}
	if names := podmanNames(t, container.LabelRun+"="+run.ID); len(names) != 0 {
		t.Errorf("container of run %s still there after the run: %v", run.ID, names)
	}
}

func eventuallyTrue(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// ctrStart starts 'postern run' without waiting; its stdout is readable as it
// comes.
type ctrStarted struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
}

type lockedBuffer struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (b lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func ctrStart(t *testing.T, home string, args ...string) *ctrStarted {
	t.Helper()
	s := &ctrStarted{done: make(chan struct{})}
	s.cmd = exec.Command(ctrBin, args...)
	s.cmd.Env = append(ctrEnv(), "POSTERN_HOME="+home)
	s.cmd.Stdout = lockedBuffer{&s.mu, &s.stdout}
	s.cmd.Stderr = lockedBuffer{&s.mu, &s.stderr}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

func (s *ctrStarted) output() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdout.String(), s.stderr.String()
}

func (s *ctrStarted) waitOutput(t *testing.T, want string) {
	t.Helper()
	if !eventuallyTrue(time.Minute, func() bool { o, _ := s.output(); return strings.Contains(o, want) }) {
		o, e := s.output()
		t.Fatalf("no %q within a minute; stdout:\n%s\nstderr:\n%s", want, o, e)
	}
}

func (s *ctrStarted) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatal("postern did not end within a minute")
	}
	return s.cmd.ProcessState.ExitCode()
}

// TestContainerGoneAfterPosternKilled kills postern with SIGKILL while its run
// sleeps: the harness loses the host and kills the run, and the engine removes
// the container.
func TestContainerGoneAfterPosternKilled(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := ctrHomeCopy(t)
	s := ctrStart(t, home, "run", "--container", ctrImage, "--", "sh", "-c", "echo ready; sleep 3001")
	s.waitOutput(t, "ready")
	// The host's directory for the container (its control socket and
	// resolv.conf) goes once the harness has connected: nothing of the run's
	// is there for a killed postern to leave.
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("postern-container-%d.*", s.cmd.Process.Pid))); len(left) != 0 {
		t.Errorf("the container's host directory is still there while it runs: %v", left)
	}
	label := container.LabelPid + "=" + strconv.Itoa(s.cmd.Process.Pid)
	names := podmanNames(t, label)
	if len(names) != 1 {
		t.Fatalf("containers of postern pid %d: %v, want one", s.cmd.Process.Pid, names)
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if !eventuallyTrue(30*time.Second, func() bool { return len(podmanNames(t, label)) == 0 }) {
		t.Fatalf("container %v still there 30s after postern was killed", podmanNames(t, label))
	}
	if pids := procsWithArg("3001"); len(pids) != 0 {
		t.Errorf("the run's sleep 3001 outlived postern: pids %v", pids)
	}
	if r := ctrPostern(t, home, "run", "--container", ctrImage, "--", "true"); r.Code != 0 {
		t.Fatalf("next run: exit %d: %s", r.Code, r.Stderr)
	}
}

// TestContainerControlDirectoryAndPidsLimit: the directory bound into the
// container for its control socket is read-only there, so a setuid shell
// cannot be left in the host's /tmp through it; and the policy's pids_limit
// (or --pids-limit) is the container's.
func TestContainerControlDirectoryAndPidsLimit(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := ctrHomeCopy(t)
	pol := writeFile(t, "ctr-pids.hcl", "pids_limit = 48\n")
	script := ctrStep("plant", "cp /bin/busybox /.postern/run/s && chmod 4755 /.postern/run/s") +
		ctrStep("pids", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max")
	for _, c := range []struct {
		args []string
		want string
	}{{[]string{"--policy", pol}, "48"}, {[]string{"--policy", pol, "--pids-limit", "40"}, "40"}} {
		args := append(append([]string{"run"}, c.args...), "--container", ctrImage, "--", "sh", "-c", script)
		r := ctrPostern(t, home, args...)
		st := ctrStatuses(t, r.Stdout)
		if r.Code != 0 || st["plant"] == 0 {
			t.Errorf("%v: exit %d, the control directory took a file (%v):\n%s%s", c.args, r.Code, st, r.Stdout, r.Stderr)
		}
		if !regexp.MustCompile(`== pids rc=0\n` + c.want + `\n`).MatchString(r.Stdout) {
			t.Errorf("%v: the container's pids.max, want %s:\n%s", c.args, c.want, r.Stdout)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "postern-container-*", "s")); len(left) != 0 {
		t.Errorf("a file planted in the control directory is on the host: %v", left)
	}
}

// procsWithArg lists processes whose command line has arg as an argument.
func procsWithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// TestContainerSignalsReachTheRun sends SIGTERM to postern: the run's own trap
// handles it and its status is postern's.
func TestContainerSignalsReachTheRun(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := ctrHomeCopy(t)
	s := ctrStart(t, home, "run", "--container", ctrImage, "--", "sh", "-c",
		`trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.2; done`)
	s.waitOutput(t, "ready")
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := s.wait(t)
	out, errOut := s.output()
	if code != 5 || !strings.Contains(out, "got-term") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the trap's 5 and got-term", code, out, errOut)
	}
	run := ctrRecord(t, home)
	if run.ExitCode == nil || *run.ExitCode != 5 {
		t.Errorf("record %+v, want exit 5", run)
	}
	if names := podmanNames(t, container.LabelRun+"="+run.ID); len(names) != 0 {
		t.Errorf("container still there: %v", names)
	}
}

// TestContainerNetworkNone runs with no network at all: nothing is reachable,
// no door runs, and the record says so.
func TestContainerNetworkNone(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	l := newE2ELab(t)
	home := ctrHomeCopy(t)
	policy := writeFile(t, "policy.hcl", l.policyFor("enforce", []string{"web.test"}, nil))
	script := ctrStep("literal", fmt.Sprintf("wget -q -O- http://%s/", l.Web.Addr)) +
		ctrStep("name", "wget -q -O- http://web.test/") +
		ctrStep("routes", "ip route; ip -6 route") + "exit 3"
	r := ctrPostern(t, home, "run", "--policy", policy, l.Resolver(), "--container", ctrImage, "--container-network", "none", "--", "sh", "-c", script)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	if r.Code != 3 {
		t.Errorf("postern exited %d, want 3", r.Code)
	}
	st := ctrStatuses(t, r.Stdout)
	if st["literal"] == 0 || st["name"] == 0 || strings.Contains(r.Stdout, "served_by") {
		t.Errorf("a container with no network reached something: %v", st)
	}
	if _, ok := st["routes"]; !ok || strings.Contains(r.Stdout, "default") {
		t.Errorf("the container has routes out: %q", r.Stdout)
	}
	if l.DNS.Asked("web.test") {
		t.Errorf("a name was resolved for a container with no network")
	}
	run := ctrRecord(t, home)
	if run.Lane != "local-container" || run.Carry != "none" || !strings.Contains(run.Why, "no network at all") ||
		run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 3 || run.Allowed+run.Denied != 0 {
		t.Errorf("run record %+v, want lane local-container, carry none, why no network, exit 3, no events", run)
	}
}

// TestContainerEgressOpen: --egress-open gives the container the engine's own
// network and no wall, on a machine never measured, and records the reason;
// with --container-network none it is refused as a contradiction.
func TestContainerEgressOpen(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	l := newE2ELab(t)
	home := t.TempDir() // never measured: an open run needs no measurement
	// Literal addresses only: the container asks the engine's resolver, which
	// is not a test host's.
	script := ctrStep("literal", fmt.Sprintf("wget -q -O- http://%s/open", l.Web.Addr)) +
		ctrStep("routes", "ip route") + "exit 5"
	const reason = "fetching the vendor toolchain"
	r := ctrPostern(t, home, "run", "--egress-open", reason, "--container", ctrImage, "--", "sh", "-c", script)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	if r.Code != 5 {
		t.Errorf("postern exited %d, want the run's 5", r.Code)
	}
	st := ctrStatuses(t, r.Stdout)
	if st["literal"] != 0 || !strings.Contains(r.Stdout, `"served_by":"web"`) || !strings.Contains(r.Stdout, `"uri":"/open"`) {
		t.Errorf("an open container did not reach the test host (rc %d)", st["literal"])
	}
	if !strings.Contains(r.Stdout, "default") {
		t.Errorf("an open container has no route out:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "WARNING: run ") || !strings.Contains(r.Stderr, "OPEN network") || !strings.Contains(r.Stderr, reason) {
		t.Errorf("no warning of the open network:\n%s", r.Stderr)
	}
	run := ctrRecord(t, home)
	if run.Lane != "local-container" || run.Carry != "none" || run.EgressOpenReason != reason ||
		run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 5 {
		t.Errorf("run record %+v, want lane local-container, carry none, the reason, exit 5", run)
	}

	both := ctrPostern(t, t.TempDir(), "run", "--egress-open", reason, "--container", ctrImage, "--container-network", "none", "--", "sh", "-c", "echo ran")
	if both.Code != 2 || !strings.Contains(both.Stderr, "contradict") || strings.Contains(both.Stdout, "ran") {
		t.Errorf("--egress-open with --container-network none: exit %d, %q %q; want refused (2)", both.Code, both.Stdout, both.Stderr)
	}
}

// TestContainerRefusedUnmeasured: a machine never measured refuses the
// container lane before any container is started.
func TestContainerRefusedUnmeasured(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := t.TempDir()
	r := ctrPostern(t, home, "run", "--container", ctrImage, "--", "sh", "-c", "echo ran")
	if r.Code != 77 || !strings.Contains(r.Stderr, "EGRESS-CLOSED-DEFAULT-REFUSED") ||
		!strings.Contains(r.Stderr, "local-container") || strings.Contains(r.Stdout, "ran") {
		t.Fatalf("exit %d stdout %q stderr %q; want refused (77) naming the lane", r.Code, r.Stdout, r.Stderr)
	}
	run := ctrRecord(t, home)
	if run.State != records.StateRefused || run.Lane != "local-container" {
		t.Errorf("record %+v", run)
	}
}

// TestContainerEngineDocker goes through the same code path with docker: where
// a docker daemon answers the run is walled; where only the CLI (or nothing) is
// installed, the run is refused saying so.
func TestContainerEngineDocker(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := ctrHomeCopy(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dock, derr := container.Detect(ctx, container.Docker)
	if derr == nil {
		// A daemon answers: the same walled run, through docker.
		img, err := container.BuildImage(ctx, dock, "postern-e2e-busybox", ctrImageFiles())
		if err != nil {
			t.Fatal(err)
		}
		l := newE2ELab(t)
		policy := writeFile(t, "policy.hcl", l.policyFor("enforce", []string{"web.test"}, nil))
		script := ctrStep("allowed", "wget -q -O- http://web.test/docker") +
			ctrStep("literal", fmt.Sprintf("wget -q -O- http://%s/", l.Other.Addr)) + "exit 9"
		r := ctrPostern(t, home, "run", "--engine", "docker", "--policy", policy, l.Resolver(), "--container", img, "--", "sh", "-c", script)
		st := ctrStatuses(t, r.Stdout)
		if r.Code != 9 || st["allowed"] != 0 || st["literal"] == 0 || !strings.Contains(r.Stdout, `"uri":"/docker"`) {
			t.Fatalf("docker run: exit %d, steps %v\nstdout:\n%s\nstderr:\n%s", r.Code, st, r.Stdout, r.Stderr)
		}
		return
	}
	r := ctrPostern(t, home, "run", "--engine", "docker", "--container", ctrImage, "--", "sh", "-c", "echo ran")
	if r.Code != 77 || !strings.Contains(r.Stderr, "EGRESS-CLOSED-DEFAULT-REFUSED") || !strings.Contains(r.Stderr, "docker") ||
		strings.Contains(r.Stdout, "ran") {
		t.Fatalf("exit %d stdout %q stderr %q; want a refusal naming docker", r.Code, r.Stdout, r.Stderr)
	}
	if _, err := exec.LookPath("docker"); err == nil && !strings.Contains(r.Stderr, "daemon") {
		t.Errorf("the docker CLI is installed: the refusal should say its daemon does not answer: %q", r.Stderr)
	}
	t.Logf("refusal: %s", r.Stderr)
}

func TestContainerFlagsNeedContainer(t *testing.T) {
	testhosts.EndToEnd(t)
	for _, args := range [][]string{
		{"run", "--engine", "podman", "--", "true"},
		{"run", "--container-network", "none", "--", "true"},
		{"run", "--container", "x", "--engine", "lxc", "--", "true"},
		{"run", "--container", "x", "--container-network", "host", "--", "true"},
	} {
		_, stderr, code := runPostern(t, args...)
		if code != 2 || stderr == "" {
			t.Errorf("postern %v: exit %d stderr %q, want 2 with a message", args, code, stderr)
		}
	}
}

// TestContainerInteractiveRunGetsATerminal runs postern on a terminal of the
// test's own: the container's command sees a terminal of that size, and its
// status is postern's.
func TestContainerInteractiveRunGetsATerminal(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	home := ctrHomeCopy(t)
	master, slave := openPTY(t, 27, 93)
	cmd := exec.Command(ctrBin, "run", "--container", ctrImage, "--", "sh", "-c", `tty; stty size; echo "TERM=$TERM"; exit 6`)
	cmd.Env = append(ctrEnv(), "POSTERN_HOME="+home, "TERM=xterm-test")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(master) // ends with EIO when the last holder of the slave is gone
		out <- b.String()
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("postern on a terminal did not end within a minute")
	}
	var text string
	select {
	case text = <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal was not closed after postern ended")
	}
	t.Logf("terminal:\n%s", text)
	if code := cmd.ProcessState.ExitCode(); code != 6 {
		t.Errorf("postern exited %d, want 6", code)
	}
	if !strings.Contains(text, "/dev/pts/") || !strings.Contains(text, "27 93") || !strings.Contains(text, "TERM=xterm-test") {
		t.Errorf("the run did not see a terminal of 27x93 with TERM: %q", text)
	}
}
