//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/postern-dev/postern/records"
)

// screenTmux is a tmux server of a test's own, for looking at postern as a
// person at a terminal does.
type screenTmux struct {
	t    testing.TB
	bin  string
	sock string
}

func newScreenTmux(t testing.TB) *screenTmux {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux is what terminal output is checked in (apt-get install tmux): %v", err)
	}
	s := &screenTmux{t: t, bin: bin, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() { _, _ = s.run("kill-server") })
	return s
}

func (s *screenTmux) run(args ...string) (string, error) {
	out, err := exec.Command(s.bin, append([]string{"-S", s.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	return string(out), err
}

// start runs command (a shell line) in a new window of cols by rows, with env.
func (s *screenTmux) start(name string, cols, rows int, env []string, command string) {
	s.t.Helper()
	var line strings.Builder
	line.WriteString("env -i")
	for _, kv := range env {
		line.WriteString(" " + shellQuote(kv))
	}
	line.WriteString(" TERM=screen sh -c " + shellQuote(command+"; echo '<done>'; sleep 600"))
	if out, err := s.run("new-session", "-d", "-s", name, "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), line.String()); err != nil {
		s.t.Fatalf("tmux new-session: %v: %s", err, out)
	}
}

// capture is what the window shows, its wrapped lines joined (-J) so a line
// too long for the terminal is seen as one.
func (s *screenTmux) capture(name string) string {
	s.t.Helper()
	out, err := s.run("capture-pane", "-p", "-J", "-t", name)
	if err != nil {
		s.t.Fatalf("capture-pane: %v: %s", err, out)
	}
	return out
}

// waitFor captures the window until it shows want.
func (s *screenTmux) waitFor(name, want string, d time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		screen := s.capture(name)
		if strings.Contains(screen, want) {
			return screen
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen never showed %q:\n%s", want, screen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The probe's table fits the terminal, each rung's detail shortened, and
// says where the whole text is; machine show and --json have it whole.
func TestProbeTableFitsTheTerminal(t *testing.T) {
	c := newController(t)
	tm := newScreenTmux(t)
	tm.start("probe", 90, 40, c.env(), shellQuote(binFor(t))+" machine probe-confinement")
	screen := tm.waitFor("probe", "<done>", 60*time.Second)
	long := 0
	for _, l := range strings.Split(screen, "\n") {
		if n := utf8.RuneCountInString(strings.TrimRight(l, " ")); n > 90 {
			t.Fatalf("a line of %d columns on a 90-column terminal:\n%s", n, screen)
		}
		if strings.HasSuffix(strings.TrimRight(l, " "), "…") {
			long++
		}
	}
	t.Logf("the probe on a 90-column terminal:\n%s", screen)
	if long == 0 || !strings.Contains(screen, "(details shortened to 90 columns: 'postern machine show local' and --json have them whole)") {
		t.Fatalf("no detail was shortened on a 90-column terminal:\n%s", screen)
	}
	var v machineView
	if err := json.Unmarshal([]byte(c.mustPostern(t, "machine", "show", "local", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	show := c.mustPostern(t, "machine", "show", "local")
	whole := 0
	for name, g := range v.Rungs {
		if len(g.Detail) > 90 {
			whole++
			if !strings.Contains(show, g.Detail) {
				t.Fatalf("machine show lacks the whole detail of %s (%q):\n%s", name, g.Detail, show)
			}
		}
	}
	if whole == 0 {
		t.Fatalf("no rung has a detail longer than the terminal: %+v", v.Rungs)
	}
}

// Measuring several machines ends with one summary table, not a table each.
func TestProbeAllSummary(t *testing.T) {
	c := newController(t)
	// A machine that cannot be reached (nothing listens on the port).
	c.writeSSH(t, "config", "Host gone\n  HostName 127.0.0.1\n  Port 9\n  User root\n")
	c.mustPostern(t, "machine", "add", "gone", "--ssh", "gone")
	o, e, code := c.postern(t, "machine", "probe-confinement", "--all")
	if code == 0 || !strings.Contains(e, "1 of 2 machines could not be measured: gone") {
		t.Fatalf("probe --all with one unreachable: exit %d\n%s%s", code, o, e)
	}
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "RUNGS NO") ||
		!strings.HasPrefix(lines[1], "local ") || !strings.Contains(lines[1], "network-wall") || !strings.Contains(lines[2], "postern machine show NAME") {
		t.Fatalf("probe --all output:\n%s", o)
	}
	if strings.Contains(o, "RUNG ") || strings.Contains(o, "DETAIL") {
		t.Fatalf("probe --all printed a machine's table:\n%s", o)
	}
}

// machine show prints labels; its JSON has every key, empty or not.
func TestMachineShowLabels(t *testing.T) {
	c := newController(t)
	c.mustPostern(t, "machine", "add", "gpu1", "--ssh", "root@10.250.0.1", "--label", "zone=b", "--label", "gpu=a100")
	c.mustPostern(t, "machine", "add", "bare", "--ssh", "root@10.250.0.2")
	if out := c.mustPostern(t, "machine", "show", "gpu1"); !strings.Contains(out, "labels    gpu=a100, zone=b\n") {
		t.Fatalf("machine show gpu1:\n%s", out)
	}
	keys := func(name string) []string {
		var m map[string]any
		if err := json.Unmarshal([]byte(c.mustPostern(t, "machine", "show", name, "--json")), &m); err != nil {
			t.Fatal(err)
		}
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	a, b, l := keys("gpu1"), keys("bare"), keys("local")
	if !slices.Equal(a, b) || !slices.Equal(a, l) || !slices.Contains(a, "labels") || !slices.Contains(a, "agents") {
		t.Fatalf("machine show --json keys differ:\ngpu1  %v\nbare  %v\nlocal %v", a, b, l)
	}
}

// runs list filters by machine, state and start, keeps the newest N, and has
// a duration column; every run in its JSON has the same keys; a run's record
// keeps its policy's sha256 and text (cut at 64 KiB) and its wall's pid.
func TestRunsListFiltersAndRecords(t *testing.T) {
	c := newController(t)
	c.PosternHome = measuredHome(t)
	c.mustPostern(t, "machine", "add", "far", "--ssh", "root@10.250.0.1")
	pol := filepath.Join(t.TempDir(), "p.hcl")
	polSrc := "mode = \"enforce\"\nports = [443]\nallow = [\"example.test\"]\n"
	if err := os.WriteFile(pol, []byte(polSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big.hcl")
	bigSrc := "mode = \"enforce\"\n" + strings.Repeat("# padding to pass the bound on the text a record keeps\n", 1500)
	if err := os.WriteFile(big, []byte(bigSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustPostern(t, "run", "--policy", pol, "--", "true")
	if _, _, code := c.postern(t, "run", "--", "sh", "-c", "sleep 0.3; exit 3"); code != 3 {
		t.Fatalf("exit 3 run: %d", code)
	}
	if _, _, code := c.postern(t, "run", "--machine", "far", "--policy", big, "--", "true"); code != 77 {
		t.Fatalf("run on unmeasured far: %d", code)
	}
	list := func(args ...string) []records.Run {
		t.Helper()
		var rs []records.Run
		out := c.mustPostern(t, append([]string{"runs", "list", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("runs list --json %v: %v: %s", args, err, out)
		}
		return rs
	}
	all := list()
	if len(all) != 3 {
		t.Fatalf("%d runs", len(all))
	}
	ok, three, far := all[0], all[1], all[2]
	if rs := list("--machine", "far"); len(rs) != 1 || rs[0].ID != far.ID {
		t.Fatalf("--machine far: %+v", rs)
	}
	if rs := list("--state", "exited", "--machine", "local"); len(rs) != 2 {
		t.Fatalf("--state exited: %d runs", len(rs))
	}
	if rs := list("--limit", "2"); len(rs) != 2 || rs[0].ID != three.ID || rs[1].ID != far.ID {
		t.Fatalf("--limit 2: %+v", rs)
	}
	if rs := list("--since", "1h"); len(rs) != 3 {
		t.Fatalf("--since 1h: %d", len(rs))
	}
	if rs := list("--since", time.Now().Add(time.Hour).Format("2006-01-02 15:04")); len(rs) != 0 {
		t.Fatalf("--since an hour ahead: %d", len(rs))
	}
	if _, e, code := c.postern(t, "runs", "list", "--state", "done"); code != 2 || !strings.Contains(e, "one of running, exited, failed, refused, lost") {
		t.Fatalf("--state done: exit %d: %s", code, e)
	}
	if _, e, code := c.postern(t, "runs", "list", "--since", "yesterday"); code != 2 || !strings.Contains(e, "give a duration back from now") {
		t.Fatalf("--since yesterday: exit %d: %s", code, e)
	}
	// The duration column.
	text := c.mustPostern(t, "runs", "list")
	rows := strings.Split(strings.TrimSpace(text), "\n")
	header := strings.Fields(rows[0])
	di := slices.Index(header, "DURATION")
	if di < 0 || len(rows) != 4 {
		t.Fatalf("runs list:\n%s", text)
	}
	durOf := func(row string) string {
		// STARTED is two fields (date and time).
		return strings.Fields(row)[di+1]
	}
	if d, err := time.ParseDuration(durOf(rows[2])); err != nil || d < 300*time.Millisecond || d > 30*time.Second {
		t.Fatalf("duration of the sleep 0.3 run %q (%v):\n%s", durOf(rows[2]), err, text)
	}
	if durOf(rows[3]) != "-" {
		t.Fatalf("duration of a refused run %q:\n%s", durOf(rows[3]), text)
	}
	// One shape: every run has every key.
	var raw []map[string]any
	if err := json.Unmarshal([]byte(c.mustPostern(t, "runs", "list", "--json")), &raw); err != nil {
		t.Fatal(err)
	}
	keysOf := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	for i := range raw {
		if !slices.Equal(keysOf(raw[i]), keysOf(raw[0])) {
			t.Fatalf("run %d has keys %v, run 0 %v", i, keysOf(raw[i]), keysOf(raw[0]))
		}
	}
	for _, k := range []string{"ended_at", "why", "seal", "policy_sha256", "policy_text", "run_pid", "writes", "dir"} {
		if _, ok := raw[0][k]; !ok {
			t.Fatalf("runs list --json lacks %q: %v", k, keysOf(raw[0]))
		}
	}
	// The policy as the run was given it.
	sum := sha256.Sum256([]byte(polSrc))
	if ok.PolicySHA256 != hex.EncodeToString(sum[:]) || ok.PolicyText != polSrc || ok.PolicyTextCut {
		t.Fatalf("policy kept: %s %q %v", ok.PolicySHA256, ok.PolicyText, ok.PolicyTextCut)
	}
	bsum := sha256.Sum256([]byte(bigSrc))
	if far.PolicySHA256 != hex.EncodeToString(bsum[:]) || len(far.PolicyText) != records.MaxPolicyText || !far.PolicyTextCut || !strings.HasPrefix(bigSrc, far.PolicyText) {
		t.Fatalf("big policy kept: %s, %d bytes, cut %v", far.PolicySHA256, len(far.PolicyText), far.PolicyTextCut)
	}
	if three.PolicySHA256 != "" || three.PolicyText != "" {
		t.Fatalf("a run without a policy keeps %q", three.PolicySHA256)
	}
	// The wall's pid, not the controller's.
	if ok.RunPid <= 0 || ok.RunPid == ok.Pid {
		t.Fatalf("run pid %d, controller pid %d", ok.RunPid, ok.Pid)
	}
	if show := c.mustPostern(t, "runs", "show", ok.ID); !strings.Contains(show, "policy sha256  "+ok.PolicySHA256) || !strings.Contains(show, fmt.Sprintf("pid            %d on local", ok.RunPid)) {
		t.Fatalf("runs show:\n%s", show)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// 'runs events --follow' keeps its columns under its header while the
// events come a few at a time, seen in tmux.
func TestRunsEventsFollowAligned(t *testing.T) {
	c := newController(t)
	c.PosternHome = measuredHome(t)
	pol := filepath.Join(t.TempDir(), "p.hcl")
	if err := os.WriteFile(pol, []byte("mode = \"enforce\"\nports = [443]\nallow = [\"example.test\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Denials of names short and long (the door's DNS) and of a port the
	// policy does not have (the wall), half a second apart.
	script := `sleep 1.5
for h in a.test a-much-longer-name-than-the-column-has-room-for.denied.test b.test; do curl -s --max-time 2 "https://$h/" >/dev/null; sleep 0.5; done
curl -s --max-time 2 http://192.0.2.7:8081/ >/dev/null; sleep 0.5
curl -s --max-time 2 https://x.test/ >/dev/null; true`
	done := make(chan string, 1)
	go func() {
		// Nothing here is allowed, so nothing is looked up; the resolver is
		// one where nothing answers all the same.
		_, e, _ := c.postern(t, "run", "-q", "--policy", pol, "--resolver", "127.0.0.1:9", "--", "sh", "-c", script)
		done <- e
	}()
	var id string
	waitUntil(t, 20*time.Second, "the run to start", func() bool {
		var rs []records.Run
		if json.Unmarshal([]byte(c.mustPostern(t, "runs", "list", "--state", "running", "--json")), &rs) == nil && len(rs) == 1 {
			id = rs[0].ID
		}
		return id != ""
	})
	tm := newScreenTmux(t)
	tm.start("follow", 200, 40, c.env(), shellQuote(binFor(t))+" runs events --follow "+id)
	screen := tm.waitFor("follow", "<done>", 60*time.Second)
	t.Logf("runs events --follow:\n%s", screen)
	if e := <-done; strings.Contains(e, "postern:") && !strings.Contains(e, "denied") {
		t.Logf("run stderr: %s", e)
	}
	var lines []string
	for _, l := range strings.Split(screen, "\n") {
		if strings.TrimSpace(l) != "" && l != "<done>" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("follow showed:\n%s", screen)
	}
	header := lines[0]
	var starts []int
	for _, col := range []string{"EVENT", "KIND", "DECISION", "HOST", "PORT", "ADDR", "BYTES UP/DOWN", "REASON"} {
		i := strings.Index(header, col)
		if i <= 0 {
			t.Fatalf("header %q lacks %s", header, col)
		}
		starts = append(starts, i)
	}
	hosts := map[string]bool{}
	for _, line := range lines[1:] {
		row := []rune(line)
		for _, p := range starts {
			// Every cell ends before the next column starts.
			if len(row) > p && row[p-1] != ' ' {
				t.Fatalf("row out of its columns at %d:\n%s\n%s", p, header, line)
			}
		}
		if len(row) > starts[4] {
			hosts[strings.Fields(string(row[starts[3]:]))[0]] = true
		}
	}
	for _, h := range []string{"a.test", "a-much-longer-name-than-the-column-has-…", "b.test", "x.test"} {
		if !hosts[h] {
			t.Fatalf("follow did not show %s:\n%s", h, screen)
		}
	}
	if !strings.Contains(screen, "port 8081 is not in the policy's ports") {
		t.Fatalf("follow did not show the wall's refusal:\n%s", screen)
	}
	// --json: every event has every key, whatever its kind.
	var first []string
	for i, line := range strings.Split(strings.TrimSpace(c.mustPostern(t, "runs", "events", id, "--json")), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, line)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if i == 0 {
			first = keys
		}
		if !slices.Equal(keys, first) || !slices.Contains(keys, "port") || !slices.Contains(keys, "bytes_up") || !slices.Contains(keys, "repeats") {
			t.Fatalf("event %d has keys %v, the first %v", i, keys, first)
		}
	}
}

// A remote run's record holds where it ran on the remote: its wall's pid
// there (a process in a pid namespace of its own, not the controller) and
// the directory its command started in.
func TestRemoteRunRecordsWhereItRan(t *testing.T) {
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	type result struct {
		out, err string
		code     int
	}
	done := make(chan result, 1)
	go func() {
		o, e, code := r.C.postern(t, "run", "--machine", "far", "--", "sh", "-c", "pwd; sleep 3")
		done <- result{o, e, code}
	}()
	var running records.Run
	waitUntil(t, 30*time.Second, "the remote run to start", func() bool {
		var rs []records.Run
		if json.Unmarshal([]byte(r.C.mustPostern(t, "runs", "list", "--state", "running", "--json")), &rs) == nil && len(rs) == 1 && rs[0].RunPid > 0 {
			running = rs[0]
			return true
		}
		return false
	})
	// The remote is this machine: its pid is a process here.
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", running.RunPid))
	if err != nil {
		t.Fatalf("the recorded pid %d is no process on the remote: %v", running.RunPid, err)
	}
	self, _ := os.Readlink("/proc/self/ns/pid")
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", running.RunPid))
	if ns == self || !strings.Contains(string(cmdline), "__wall-init") {
		t.Fatalf("pid %d (%q, %s) is not the run's wall", running.RunPid, cmdline, ns)
	}
	res := <-done
	if res.code != 0 {
		t.Fatalf("remote run: exit %d: %s", res.code, res.err)
	}
	run := lastRun(t, r.C)
	pwd := strings.TrimSpace(res.out)
	if run.RunPid != running.RunPid || run.RunPid == run.Pid || run.Dir != pwd || !strings.HasPrefix(pwd, r.Remote.Home+"/") {
		t.Fatalf("record: pid %d (controller %d), dir %q; the command ran in %q", run.RunPid, run.Pid, run.Dir, pwd)
	}
}
