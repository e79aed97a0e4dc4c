//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// fleetLab is several remote machines, each a test host running its own
// OpenSSH sshd, added to one controller and measured, and one machine added
// but never measured ("never", an alias of m1's address).
type fleetLab struct {
	C     *controller
	Hosts map[string]*sshHost
	Names []string
}

func newFleetLab(t testing.TB, n int) *fleetLab {
	t.Helper()
	lab := testhosts.NewTestLab(t, "fleet")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fleetLab{C: newController(t), Hosts: map[string]*sshHost{}}
	var cfg strings.Builder
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("m%d", i)
		h, err := lab.Host(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s := startSSHD(t, h, h.Addr, f.C.Pub)
		f.Hosts[name] = s
		f.Names = append(f.Names, name)
		fmt.Fprintf(&cfg, "Host %s-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n", name, h.Addr)
		f.C.trust(t, h.Addr.String(), s.HostPub)
	}
	fmt.Fprintf(&cfg, "Host never-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n", f.Hosts["m1"].Addr)
	f.C.writeSSH(t, "config", cfg.String())
	for _, name := range f.Names {
		f.C.mustPostern(t, "machine", "add", name, "--ssh", name+"-alias")
		f.C.mustPostern(t, "machine", "probe-confinement", name)
	}
	f.C.mustPostern(t, "machine", "add", "never", "--ssh", "never-alias")
	return f
}

// tasksFile writes a tasks file.
func tasksFile(t testing.TB, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tasks.hcl")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dispatchRecord reads a dispatch's record through 'dispatches show --json'.
func dispatchRecord(t testing.TB, c *controller, id string) *fleet.Record {
	t.Helper()
	out := c.mustPostern(t, "dispatches", "show", "--json", id)
	var v struct {
		ID     string        `json:"id"`
		State  string        `json:"state"`
		Record *fleet.Record `json:"record"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("dispatches show --json: %v: %s", err, out)
	}
	if v.Record == nil {
		t.Fatalf("dispatch %s has no record: %s", id, out)
	}
	return v.Record
}

// dispatchRuns reads the runs of a dispatch through 'runs list --dispatch'.
func dispatchRuns(t testing.TB, c *controller, id string) []records.Run {
	t.Helper()
	out := c.mustPostern(t, "runs", "list", "--json", "--dispatch", id)
	var rs []records.Run
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("runs list --json --dispatch: %v: %s", err, out)
	}
	return rs
}

// dispatchID is the id the first line of plain output names.
func dispatchID(t testing.TB, out string) string {
	t.Helper()
	m := regexp.MustCompile(`dispatch (\d{8}-\d{6}-[0-9a-f]{6}) running`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no dispatch id in the output:\n%s", out)
	}
	return m[1]
}

// maxOverlap is the most runs of rs on machine at once, by their records'
// start and end times.
func maxOverlap(rs []records.Run, machine string) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range rs {
		if r.Machine != machine {
			continue
		}
		edges = append(edges, edge{r.StartedAt, 1}, edge{r.EndedAt, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta // an end before a start at the same instant
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// TestDispatchFleet dispatches tasks files over three remote machines, each a
// real OpenSSH sshd on a test host, through the built binary.
func TestDispatchFleet(t *testing.T) {
	f := newFleetLab(t, 3)
	c := f.C
	c.mustPostern(t, "machine", "label", "m2", "gpu=a100")
	c.mustPostern(t, "machine", "label", "m3", "--per-machine", "1", "gpu", "gpu-")
	// m1's own slots from the inventory (the same host: its record stays).
	inv := filepath.Join(t.TempDir(), "machines.hcl")
	if err := os.WriteFile(inv, []byte("machine \"m1\" {\n  ssh         = \"m1-alias\"\n  per_machine = 1\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := c.mustPostern(t, "machine", "import", inv); !strings.Contains(out, "updated") {
		t.Fatalf("machine import of m1: %s", out)
	}
	if _, e, code := c.postern(t, "machine", "label", "m1", "bad key=1"); code != 2 || !strings.Contains(e, "key=value") {
		t.Fatalf("machine label with a bad key: exit %d, %s", code, e)
	}
	if _, e, code := c.postern(t, "machine", "label", "nosuch", "gpu"); code != 2 || !strings.Contains(e, "machine add nosuch") {
		t.Fatalf("machine label of an unknown machine: exit %d, %s", code, e)
	}

	// Placement only where the records can wall the lane and the labels
	// meet the needs; per_machine (the file's 2, m3's own 1) never
	// exceeded; the queue drains; a failing task fails the dispatch and is
	// named; a task no machine of its pool can wall is refused with the
	// marker, and nothing starts for it.
	t.Run("PlacementSlotsAndFailure", func(t *testing.T) {
		var src strings.Builder
		src.WriteString("machines = [\"m1\", \"m2\", \"m3\", \"never\"]\nper_machine = 2\n")
		for i := 1; i <= 12; i++ {
			fmt.Fprintf(&src, "task \"t%02d\" {\n  command = [\"sh\", \"-c\", \"sleep 0.4; echo out-t%02d; echo err-t%02d >&2\"]\n}\n", i, i, i)
		}
		src.WriteString("task \"gpu\" {\n  command = [\"sh\", \"-c\", \"echo gpu\"]\n  needs = [\"gpu\"]\n}\n")
		src.WriteString("task \"bad\" {\n  command = [\"sh\", \"-c\", \"exit 7\"]\n}\n")
		src.WriteString("task \"nowhere\" {\n  command = [\"true\"]\n  machines = [\"never\"]\n}\n")
		// network = "none": the run's namespace has only lo, and the
		// machine's own sshd, one hop away, cannot be reached from it.
		fmt.Fprintf(&src, "task \"offline\" {\n  command = [\"sh\", \"-c\", \"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; curl -sS --max-time 3 -o /dev/null http://%s:22/ && echo REACHED || echo unreachable\"]\n  network = \"none\"\n}\n", f.Hosts["m1"].Addr)
		stdout, stderr, code := c.postern(t, "dispatch", tasksFile(t, src.String()))
		if code != 1 {
			t.Fatalf("dispatch: exit %d, want 1 (a task failed)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if !regexp.MustCompile(`(?m)^bad\s+m\d\s+failed\s+7\s`).MatchString(stdout) {
			t.Fatalf("the summary does not name the failing task with its exit:\n%s", stdout)
		}
		if !strings.Contains(stdout, "nowhere refused: "+"EGRESS-CLOSED-DEFAULT-REFUSED") {
			t.Fatalf("the task no machine can wall is not refused with the marker:\n%s", stdout)
		}
		id := dispatchID(t, stdout)
		rec := dispatchRecord(t, c, id)
		rs := dispatchRuns(t, c, id)
		if len(rs) != 15 {
			t.Fatalf("%d runs recorded for the dispatch, want 15 (12 + gpu + bad + offline; nothing for the refused one): %+v", len(rs), rs)
		}
		byTask := map[string]records.Run{}
		used := map[string]int{}
		for _, r := range rs {
			if r.Dispatch != id || r.Task == "" {
				t.Fatalf("run %s does not name its dispatch and task: %+v", r.ID, r)
			}
			if r.Machine == "never" || r.Machine == "local" {
				t.Fatalf("run %s (task %s) placed on %s, which was never measured / not in the pool", r.ID, r.Task, r.Machine)
			}
			if r.Carry != "network-wall" {
				t.Fatalf("run %s on %s carried by %q, want network-wall", r.ID, r.Machine, r.Carry)
			}
			byTask[r.Task] = r
			used[r.Machine]++
		}
		if byTask["gpu"].Machine != "m2" {
			t.Fatalf("the gpu task ran on %s; only m2 has the gpu label", byTask["gpu"].Machine)
		}
		// The GPU rung was measured on each machine: no GPU here, so "no".
		var shown struct {
			Rungs map[string]struct {
				Result string `json:"result"`
			} `json:"rungs"`
		}
		if err := json.Unmarshal([]byte(c.mustPostern(t, "machine", "show", "--json", "m1")), &shown); err != nil || shown.Rungs["gpu"].Result != "no" {
			t.Fatalf("m1's gpu rung: %+v %v", shown.Rungs["gpu"], err)
		}
		for _, m := range f.Names {
			limit := 2
			if m == "m3" || m == "m1" {
				limit = 1 // m3's label, m1's inventory
			}
			if n := maxOverlap(rs, m); n > limit || used[m] == 0 {
				t.Fatalf("machine %s: %d runs at once (limit %d), %d runs in all", m, n, limit, used[m])
			}
		}
		for _, tr := range rec.Tasks {
			want := fleet.Exited
			switch tr.Name {
			case "bad":
				want = fleet.Failed
			case "nowhere":
				want = fleet.Refused
			}
			if tr.State != want {
				t.Fatalf("task %s ended %s, want %s (%s)", tr.Name, tr.State, want, tr.Why)
			}
		}
		if rec.Summary == nil || rec.Summary.ExitCode != 1 || rec.Summary.Exited != 14 {
			t.Fatalf("summary: %+v", rec.Summary)
		}
		off := byTask["offline"]
		oo, oe, _ := c.postern(t, "runs", "logs", off.ID)
		if off.Network != "none" || oo != "lo\nunreachable\n" || !strings.Contains(oe, "curl") {
			t.Fatalf("the offline task's run (network %q) wrote %q on stdout and %q on stderr; want only lo, and curl failing", off.Network, oo, oe)
		}
		// The output of a run is kept, byte for byte, stream by stream.
		r := byTask["t07"]
		lo, le, lc := c.postern(t, "runs", "logs", r.ID)
		if lc != 0 || lo != "out-t07\n" || le != "err-t07\n" {
			t.Fatalf("runs logs %s: exit %d, stdout %q, stderr %q; want out-t07 and err-t07", r.ID, lc, lo, le)
		}
	})

	// 100 short tasks over the three machines at per_machine 4 (m3 at its
	// own 1): every one exits 0, on every machine, within its slots.
	t.Run("HundredTasks", func(t *testing.T) {
		c.mustPostern(t, "machine", "label", "m3", "--per-machine", "0")
		c.mustPostern(t, "machine", "label", "m1", "--per-machine", "0")
		var src strings.Builder
		src.WriteString("machines = [\"m1\", \"m2\", \"m3\"]\nper_machine = 4\n")
		for i := 0; i < 100; i++ {
			fmt.Fprintf(&src, "task \"n%03d\" {\n  command = [\"true\"]\n}\n", i)
		}
		t0 := time.Now()
		stdout, stderr, code := c.postern(t, "dispatch", tasksFile(t, src.String()))
		took := time.Since(t0)
		if code != 0 {
			t.Fatalf("dispatch of 100: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		id := dispatchID(t, stdout)
		rs := dispatchRuns(t, c, id)
		if len(rs) != 100 {
			t.Fatalf("%d runs, want 100", len(rs))
		}
		for _, r := range rs {
			if r.State != records.StateExited || r.ExitCode == nil || *r.ExitCode != 0 {
				t.Fatalf("run %s (task %s): %s %v: %s", r.ID, r.Task, r.State, r.ExitCode, r.Why)
			}
		}
		for _, m := range f.Names {
			if n := maxOverlap(rs, m); n > 4 || n == 0 {
				t.Fatalf("machine %s: %d runs at once, want 1 to 4", m, n)
			}
		}
		t.Logf("100 tasks over 3 machines at per_machine 4: %s", took.Round(time.Millisecond))
	})

	// Many slots on one machine: twelve runs start at once on one sshd
	// (its MaxStartups the default, 10), and none is turned away.
	t.Run("ManySlotsOneMachine", func(t *testing.T) {
		var src strings.Builder
		src.WriteString("machines = [\"m2\"]\nper_machine = 12\nretries = 0\n")
		for i := 0; i < 36; i++ {
			fmt.Fprintf(&src, "task \"o%02d\" {\n  command = [\"true\"]\n}\n", i)
		}
		// --policy fills in the policy of the tasks that have none.
		pol := filepath.Join(t.TempDir(), "fill.hcl")
		if err := os.WriteFile(pol, []byte("mode = \"enforce\"\nports = [443]\nallow = [\"example.test\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := c.postern(t, "dispatch", "--policy", pol, tasksFile(t, src.String()))
		if code != 0 {
			t.Fatalf("36 tasks at 12 slots on one machine: exit %d\n%s\n%s", code, stdout, stderr)
		}
		rs := dispatchRuns(t, c, dispatchID(t, stdout))
		if n := maxOverlap(rs, "m2"); len(rs) != 36 || n > 12 || n < 2 {
			t.Fatalf("%d runs, %d at once", len(rs), n)
		}
		for _, r := range rs {
			if r.Policy != pol || r.Mode != "enforce" {
				t.Fatalf("run %s under policy %q (%s), want --policy's %s", r.ID, r.Policy, r.Mode, pol)
			}
		}
	})

	// On a terminal: the live frame (slots in use, one line per task) drawn
	// in place, a denial above it prefixed by its task's name as it
	// happens, and the summary at the end.
	t.Run("Terminal", func(t *testing.T) {
		src := "machines = [\"m1\", \"m2\"]\n" +
			"task \"curious\" {\n  command = [\"sh\", \"-c\", \"curl -sS --max-time 5 http://denied.test/ || true; sleep 1\"]\n}\n" +
			"task \"quiet\" {\n  command = [\"sleep\", \"1\"]\n}\n"
		p := c.startOnPTY(t, 30, 120, "dispatch", tasksFile(t, src))
		p.waitFor(t, 30*time.Second, regexp.MustCompile(`slots \d/2 in use`))
		p.waitFor(t, 30*time.Second, regexp.MustCompile(`curious: denied dns denied\.test`))
		if code := p.exit(t, 60*time.Second); code != 0 {
			t.Fatalf("dispatch on a terminal: exit %d\n%s", code, p.output())
		}
		out := p.output()
		if !strings.Contains(out, "\x1b[") || !regexp.MustCompile(`(?m)^curious\s+m\d\s+exited\s+0\s.*\s[1-9]\d*\s*\r?$`).MatchString(out) {
			t.Fatalf("no redrawn frame, or no summary with curious's denials:\n%q", out)
		}
	})

	// --detach returns the id at once; the background process outlives the
	// command; wait follows it to its end and exits as it does.
	// A tasks file's env values reach the runs and nothing else: the
	// records file holds the names, never a value, in the dispatch record,
	// the runs' records or their kept output.
	t.Run("TasksFileEnvNeverRecorded", func(t *testing.T) {
		secret := "tasks-secret-" + randHex(12)
		src := fmt.Sprintf("machines = [\"m1\", \"m2\"]\nenv = { FILE_SECRET = %q }\n", secret) +
			"task \"a\" {\n  command = [\"sh\", \"-c\", \"printf %s \\\"$FILE_SECRET\\\" | sha256sum\"]\n}\n" +
			fmt.Sprintf("task \"b\" {\n  command = [\"sh\", \"-c\", \"printf %%s \\\"$TASK_SECRET\\\" | sha256sum\"]\n  env = { TASK_SECRET = %q }\n}\n", secret+"-b")
		out := c.mustPostern(t, "dispatch", tasksFile(t, src))
		ids := map[string]bool{}
		for _, r := range dispatchRuns(t, c, dispatchID(t, out)) {
			ids[r.ID] = true
			want := sha256Hex([]byte(secret))
			if r.Task == "b" {
				want = sha256Hex([]byte(secret + "-b"))
			}
			if lo := c.mustPostern(t, "runs", "logs", r.ID); lo != want+"  -\n" {
				t.Fatalf("task %s saw %q, want the hash of its value %s", r.Task, lo, want)
			}
		}
		if len(ids) != 2 || strings.Contains(out, secret) {
			t.Fatalf("%d runs; dispatch output:\n%s", len(ids), out)
		}
		assertNowhere(t, filepath.Join(c.PosternHome, "records.db"), secret)
	})

	t.Run("DetachWait", func(t *testing.T) {
		src := "machines = [\"m1\", \"m2\"]\n" +
			"task \"one\" {\n  command = [\"sh\", \"-c\", \"sleep 2.5; echo detached-one$VIA\"]\n}\n" +
			"task \"two\" {\n  command = [\"sh\", \"-c\", \"sleep 1; echo detached-two$VIA\"]\n}\n"
		t0 := time.Now()
		// --env reaches every task through the background process, and
		// its value never goes on a command line.
		out := c.mustPostern(t, "dispatch", "--detach", "--env", "VIA=-secret-via-env", tasksFile(t, src))
		if took := time.Since(t0); took > 900*time.Millisecond {
			t.Fatalf("--detach took %s: it must not wait for the tasks", took)
		}
		id := strings.TrimSpace(out)
		if !regexp.MustCompile(`^\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(id) {
			t.Fatalf("--detach printed %q, want the dispatch's id", out)
		}
		list := c.mustPostern(t, "dispatches", "list")
		if !regexp.MustCompile(regexp.QuoteMeta(id) + `\s+running`).MatchString(list) {
			t.Fatalf("dispatches list right after --detach does not show it running:\n%s", list)
		}
		// The background process leads a session of its own: no terminal's
		// hangup reaches it.
		var d struct {
			Pid      int  `json:"pid"`
			Detached bool `json:"detached"`
		}
		if err := json.Unmarshal([]byte(c.mustPostern(t, "dispatches", "show", "--json", id)), &d); err != nil || !d.Detached || d.Pid == 0 {
			t.Fatalf("the detached dispatch's record: %+v %v", d, err)
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(d.Pid) + "/stat")
		if err != nil {
			t.Fatalf("the background process %d, while its tasks run: %v", d.Pid, err)
		}
		if f := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+1:]); len(f) < 4 || f[3] != strconv.Itoa(d.Pid) {
			t.Fatalf("the background process %d is not a session leader: %s", d.Pid, stat)
		}
		if cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(d.Pid) + "/cmdline"); strings.Contains(string(cmdline), "secret-via-env") || !strings.Contains(string(cmdline), "--env=VIA") {
			t.Fatalf("the background process's command line: %q; want --env=VIA and never its value", cmdline)
		}
		// Follow one run's output while it runs: what it writes after the
		// follow began arrives, and the follow ends with the run.
		var runID string
		waitUntil(t, 20*time.Second, "a run of the detached dispatch", func() bool {
			for _, tr := range dispatchRecord(t, c, id).Tasks {
				for _, a := range tr.Attempts {
					if a.RunID != "" && tr.Name == "one" {
						runID = a.RunID
					}
				}
			}
			return runID != ""
		})
		followed := time.Now()
		fo, fe, fc := c.postern(t, "runs", "logs", "--follow", runID)
		if fc != 0 || fo != "detached-one-secret-via-env\n" {
			t.Fatalf("runs logs --follow %s, begun while it ran: exit %d, %q %q", runID, fc, fo, fe)
		}
		var one records.Run
		if err := json.Unmarshal([]byte(c.mustPostern(t, "runs", "show", "--json", runID)), &one); err != nil || !one.EndedAt.After(followed) {
			t.Fatalf("run %s ended %s, before the follow began (%s): the follow was not tested (%v)", runID, one.EndedAt, followed, err)
		}
		wo, we, wc := c.postern(t, "dispatches", "wait", id)
		if wc != 0 || !regexp.MustCompile(`(?m)^one\s+m\d\s+exited\s+0`).MatchString(wo) || !regexp.MustCompile(`(?m)^two\s+m\d\s+exited\s+0`).MatchString(wo) {
			t.Fatalf("dispatches wait: exit %d\n%s\n%s", wc, wo, we)
		}
		rs := dispatchRuns(t, c, id)
		if len(rs) != 2 {
			t.Fatalf("%d runs, want 2", len(rs))
		}
		for _, r := range rs {
			if raw := c.mustPostern(t, "runs", "show", "--json", r.ID); strings.Contains(raw, "secret-via-env") || !slices.Contains(r.EnvNames, "VIA") {
				t.Fatalf("run %s's record: env names %v; the value must never be recorded:\n%s", r.ID, r.EnvNames, raw)
			}
			lo := c.mustPostern(t, "runs", "logs", "--follow", r.ID)
			if lo != "detached-"+r.Task+"-secret-via-env\n" {
				t.Fatalf("runs logs %s (task %s): %q", r.ID, r.Task, lo)
			}
		}
	})

	// A detached dispatch cancelled with 'dispatches cancel': --max 2 holds
	// it to two runs at once over the three machines; the cancel stops them
	// on their machines and the two queued never start; wait exits 130.
	t.Run("DetachCancelMax", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		var src strings.Builder
		src.WriteString("machines = [\"m1\", \"m2\", \"m3\"]\nper_machine = 2\n")
		for i := 0; i < 4; i++ {
			fmt.Fprintf(&src, "task \"c%d\" {\n  command = [\"sleep\", \"300.%s\"]\n}\n", i, marker)
		}
		id := strings.TrimSpace(c.mustPostern(t, "dispatch", "--detach", "--max", "2", tasksFile(t, src.String())))
		pattern := "^sleep 300." + marker + "$"
		waitUntil(t, 30*time.Second, "two runs to start", func() bool { return len(pgrepPids(t, pattern)) == 2 })
		time.Sleep(500 * time.Millisecond)
		if n := len(pgrepPids(t, pattern)); n != 2 {
			t.Fatalf("%d runs at once under --max 2", n)
		}
		at := time.Now()
		co, ce, cc := c.postern(t, "dispatches", "cancel", id)
		if cc != 0 || !strings.Contains(co, "cancelled") {
			t.Fatalf("dispatches cancel: exit %d\n%s\n%s", cc, co, ce)
		}
		if n := len(pgrepPids(t, pattern)); n != 0 {
			t.Fatalf("%d runs still there once dispatches cancel returned (%s after it began)", n, time.Since(at))
		}
		if _, _, wc := c.postern(t, "dispatches", "wait", id); wc != exitCancelled {
			t.Fatalf("dispatches wait after a cancel: exit %d, want 130", wc)
		}
		rs := dispatchRuns(t, c, id)
		if len(rs) != 2 {
			t.Fatalf("%d runs started, want 2", len(rs))
		}
		for _, r := range rs {
			if r.State != records.StateCancelled {
				t.Fatalf("run %s: %s, want cancelled", r.ID, r.State)
			}
		}
		if _, ce, cc := c.postern(t, "dispatches", "cancel", id); cc == 0 || !strings.Contains(ce, "already ended") {
			t.Fatalf("a second cancel: exit %d, %s", cc, ce)
		}
	})

	// The detached dispatch's process killed outright (no cancel, no
	// chance to write anything): its runs end on their machines as their
	// agents lose it, and the records show the dispatch and its runs lost.
	t.Run("DetachedKilled", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		src := fmt.Sprintf("machines = [\"m2\", \"m3\"]\ntask \"k0\" {\n  command = [\"sleep\", \"300.%s\"]\n}\ntask \"k1\" {\n  command = [\"sleep\", \"300.%s\"]\n}\n", marker, marker)
		id := strings.TrimSpace(c.mustPostern(t, "dispatch", "--detach", tasksFile(t, src)))
		pattern := "^sleep 300." + marker + "$"
		waitUntil(t, 30*time.Second, "two runs to start", func() bool { return len(pgrepPids(t, pattern)) == 2 })
		var d struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(c.mustPostern(t, "dispatches", "show", "--json", id)), &d); err != nil || d.Pid == 0 {
			t.Fatalf("dispatch record: %+v %v", d, err)
		}
		if err := syscall.Kill(d.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		for len(pgrepPids(t, pattern)) > 0 {
			if time.Since(killed) > 10*time.Second {
				t.Fatalf("the runs are still there 10s after their dispatch's process was killed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the runs ended %s after their dispatch's process was killed", time.Since(killed).Round(time.Millisecond))
		waitUntil(t, 5*time.Second, "the killed process to be reaped", func() bool { return !alive(d.Pid) })
		if list := c.mustPostern(t, "dispatches", "list"); !regexp.MustCompile(regexp.QuoteMeta(id) + `\s+lost`).MatchString(list) {
			t.Fatalf("dispatches list does not show the killed dispatch lost:\n%s", list)
		}
		if _, _, code := c.postern(t, "dispatches", "wait", id); code != 1 {
			t.Fatalf("dispatches wait of a lost dispatch: exit %d, want 1", code)
		}
		for _, r := range dispatchRuns(t, c, id) {
			if r.State != records.StateLost {
				t.Fatalf("run %s of the killed dispatch: %s, want lost", r.ID, r.State)
			}
		}
	})

	// A task past its timeout is stopped on its machine and fails, named.
	t.Run("Timeout", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		src := fmt.Sprintf("machines = [\"m2\"]\ntask \"slow\" {\n  command = [\"sleep\", \"300.%s\"]\n  timeout = \"1s\"\n}\n", marker)
		t0 := time.Now()
		stdout, stderr, code := c.postern(t, "dispatch", tasksFile(t, src))
		if code != 1 || time.Since(t0) > 15*time.Second || !strings.Contains(stdout, "slow: timed out after 1s; stopped") {
			t.Fatalf("a task past its timeout: exit %d after %s\n%s\n%s", code, time.Since(t0), stdout, stderr)
		}
		if pgrep(t, "^sleep 300."+marker+"$") {
			t.Fatal("the timed-out run is still running")
		}
		rs := dispatchRuns(t, c, dispatchID(t, stdout))
		if len(rs) != 1 || rs[0].State != records.StateFailed || !strings.Contains(rs[0].Why, "timeout (1s) passed") {
			t.Fatalf("the timed-out run's record: %+v", rs)
		}
	})

	// Ctrl-C: SIGINT to postern stops every running task on its machine
	// within 5 s, leaving no process of the runs, no namespace of their
	// walls and no agent on the remotes; queued tasks never start; exit 130.
	t.Run("Interrupt", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		var src strings.Builder
		src.WriteString("machines = [\"m1\", \"m2\", \"m3\"]\nper_machine = 2\n")
		for i := 0; i < 8; i++ {
			fmt.Fprintf(&src, "task \"s%d\" {\n  command = [\"sh\", \"-c\", \"trap '' TERM; sleep 300.%s; echo NOT-STOPPED\"]\n}\n", i, marker)
		}
		cmd := exec.Command(binFor(t), "dispatch", tasksFile(t, src.String()))
		cmd.Env = c.env()
		cmd.Dir = c.Dir // not in this source tree: a dispatch there would ship it
		var stdout, stderr lockedLog
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { cmd.Wait(); close(waited) }()
		defer func() {
			select {
			case <-waited:
			default:
				cmd.Process.Kill()
				<-waited
			}
		}()
		pattern := "^sleep 300." + marker + "$"
		var pids []int
		waitUntil(t, 30*time.Second, "six runs to start", func() bool { pids = pgrepPids(t, pattern); return len(pids) == 6 })
		var namespaces []string
		for _, pid := range pids {
			namespaces = append(namespaces, runNamespaces(t, pid, os.Getpid())...)
		}
		if !slices.ContainsFunc(namespaces, func(n string) bool { return strings.HasPrefix(n, "net:") }) {
			t.Fatalf("the runs are in no network namespace of their own: no wall?")
		}
		if len(nsHolders(namespaces, sinceBoot(t))) == 0 {
			t.Fatal("no process holds the running runs' namespaces: the check below would see nothing")
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		at, atTicks := time.Now(), sinceBoot(t)
		agents := func() []int {
			var all []int
			for _, h := range f.Hosts {
				all = append(all, pgrepPids(t, regexp.QuoteMeta(h.Home)+".*__agent serve")...)
			}
			return all
		}
		for len(pgrepPids(t, pattern)) > 0 || len(nsHolders(namespaces, atTicks)) > 0 || len(agents()) > 0 {
			if time.Since(at) > 5*time.Second {
				out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,etime,args").Output()
				t.Fatalf("5s after SIGINT: runs %v, namespaces held %v, agents %v\n%s", pgrepPids(t, pattern), nsHolders(namespaces, atTicks), agents(), out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("everything on the remotes stopped %s after SIGINT", time.Since(at).Round(time.Millisecond))
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Fatalf("postern still runs 10s after SIGINT:\n%s\n%s", stdout.String(), stderr.String())
		}
		if code := cmd.ProcessState.ExitCode(); code != exitCancelled {
			t.Fatalf("exit %d after SIGINT, want 130\n%s\n%s", code, stdout.String(), stderr.String())
		}
		id := dispatchID(t, stdout.String())
		rs := dispatchRuns(t, c, id)
		if len(rs) != 6 {
			t.Fatalf("%d runs started, want the 6 that had slots (the queued 2 never start)", len(rs))
		}
		for _, r := range rs {
			if r.State != records.StateCancelled {
				t.Fatalf("run %s (task %s) recorded %s, want cancelled: %s", r.ID, r.Task, r.State, r.Why)
			}
			if lo, _, _ := c.postern(t, "runs", "logs", r.ID); strings.Contains(lo, "NOT-STOPPED") {
				t.Fatalf("run %s went on after its stop: %q", r.ID, lo)
			}
		}
		rec := dispatchRecord(t, c, id)
		if rec.State != fleet.Cancelled || rec.Summary == nil || rec.Summary.Cancelled != 8 {
			t.Fatalf("dispatch record after SIGINT: state %s, summary %+v", rec.State, rec.Summary)
		}
	})

	// A machine killed mid-run (its sshd and every session of it): its
	// runs are lost, it is taken out of the dispatch, and their tasks are
	// placed again on the others, where they finish.
	t.Run("MachineLost", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		var src strings.Builder
		src.WriteString("machines = [\"m1\", \"m2\", \"m3\"]\nper_machine = 2\nretries = 1\n")
		for i := 0; i < 6; i++ {
			fmt.Fprintf(&src, "task \"l%d\" {\n  command = [\"sh\", \"-c\", \"sleep 4.%s; echo finished-l%d\"]\n}\n", i, marker, i)
		}
		cmd := exec.Command(binFor(t), "dispatch", "--json", tasksFile(t, src.String()))
		cmd.Env = c.env()
		cmd.Dir = c.Dir // not in this source tree: a dispatch there would ship it
		pr, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr lockedLog
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		changes := make(chan fleet.Change, 256)
		go func() {
			defer close(changes)
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				var ch fleet.Change
				if json.Unmarshal(sc.Bytes(), &ch) == nil {
					changes <- ch
				}
			}
		}()
		running := map[string]string{} // task -> machine
		var id string
		deadline := time.After(30 * time.Second)
		onM1 := 0
		for onM1 < 2 {
			select {
			case ch, ok := <-changes:
				if !ok {
					t.Fatalf("the dispatch ended before its runs started on m1: %s", stderr.String())
				}
				id = ch.Dispatch
				if ch.Event == fleet.EventTask && ch.State == fleet.Running {
					running[ch.Task] = ch.Machine
					if ch.Machine == "m1" {
						onM1++
					}
				}
			case <-deadline:
				t.Fatalf("two runs did not start on m1 within 30s: %v", running)
			}
		}
		for _, pid := range sshdTree(f.Hosts["m1"].cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		var all []fleet.Change
		for ch := range changes {
			all = append(all, ch)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("dispatch after m1 was killed: %v, want exit 0 (the lost tasks finish elsewhere)\n%s", err, stderr.String())
		}
		lostOnM1, placedAgain := 0, 0
		for _, ch := range all {
			if ch.Event == fleet.EventTask && ch.State == fleet.Lost && ch.Machine == "m1" {
				lostOnM1++
			}
			if ch.PlacedAgain {
				placedAgain++
			}
		}
		if lostOnM1 < 2 || placedAgain < 2 {
			t.Fatalf("after m1 was killed: %d runs lost on m1, %d placed again; want at least 2 each", lostOnM1, placedAgain)
		}
		rec := dispatchRecord(t, c, id)
		for _, m := range rec.Machines {
			if m.Name == "m1" && m.State != fleet.Unreachable {
				t.Fatalf("m1 is %s in the record, want unreachable", m.State)
			}
		}
		for _, tr := range rec.Tasks {
			last := tr.Attempts[len(tr.Attempts)-1]
			if tr.State != fleet.Exited || last.Machine == "m1" {
				t.Fatalf("task %s: %s on %s (%s)", tr.Name, tr.State, last.Machine, tr.Why)
			}
			if lo := c.mustPostern(t, "runs", "logs", last.RunID); lo != "finished-"+tr.Name+"\n" {
				t.Fatalf("task %s's last run %s wrote %q", tr.Name, last.RunID, lo)
			}
		}
		rs := dispatchRuns(t, c, id)
		lost := 0
		for _, r := range rs {
			if r.Machine == "m1" && r.State == records.StateLost {
				lost++
			}
		}
		if lost < 2 {
			t.Fatalf("%d runs on m1 recorded lost, want at least 2", lost)
		}
	})

	// The agent gone (killed on the machine, its sshd left running): its
	// runs are lost and stopped there, and their tasks finish elsewhere.
	t.Run("AgentGone", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		var src strings.Builder
		// m3's own per_machine (a label) is overridden by the file's block.
		src.WriteString("machines = [\"m2\", \"m3\"]\nper_machine = 2\nretries = 1\nmachine \"m3\" {\n  per_machine = 2\n}\n")
		for i := 0; i < 4; i++ {
			fmt.Fprintf(&src, "task \"g%d\" {\n  command = [\"sh\", \"-c\", \"sleep 3.%s; echo finished-g%d\"]\n}\n", i, marker, i)
		}
		cmd := exec.Command(binFor(t), "dispatch", tasksFile(t, src.String()))
		cmd.Env = c.env()
		cmd.Dir = c.Dir
		var stdout, stderr lockedLog
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { cmd.Wait(); close(waited) }()
		defer func() {
			select {
			case <-waited:
			default:
				cmd.Process.Kill()
				<-waited
			}
		}()
		pattern := "^sleep 3." + marker + "$"
		for deadline := time.Now().Add(30 * time.Second); len(pgrepPids(t, pattern)) != 4; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("four runs did not start within 30s (%d did):\n%s\n%s", len(pgrepPids(t, pattern)), stdout.String(), stderr.String())
			}
		}
		agents := pgrepPids(t, regexp.QuoteMeta(f.Hosts["m2"].Home)+".*__agent serve")
		if len(agents) == 0 {
			t.Fatal("no agent of m2's found")
		}
		// m2's runs, by the home its sessions have.
		var onM2 []int
		for _, pid := range pgrepPids(t, pattern) {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if slices.Contains(strings.Split(string(env), "\x00"), "HOME="+f.Hosts["m2"].Home) {
				onM2 = append(onM2, pid)
			}
		}
		if len(onM2) != 2 {
			t.Fatalf("%d runs found with m2's home, want 2", len(onM2))
		}
		for _, pid := range agents {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		killed := time.Now()
		for slices.ContainsFunc(onM2, alive) {
			if time.Since(killed) > 5*time.Second {
				t.Fatalf("m2's runs %v still there 5s after its agents were killed", onM2)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("m2's runs were gone %s after its agents were killed", time.Since(killed).Round(time.Millisecond))
		select {
		case <-waited:
		case <-time.After(60 * time.Second):
			t.Fatalf("the dispatch did not end:\n%s", stdout.String())
		}
		out := stdout.String()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("dispatch after m2's agents were killed: exit %d\n%s\n%s", code, out, stderr.String())
		}
		if !strings.Contains(out, "machine m2 unreachable") || !regexp.MustCompile(`g\d lost on m2`).MatchString(out) {
			t.Fatalf("no run lost on m2, or m2 not taken out:\n%s", out)
		}
		rec := dispatchRecord(t, c, dispatchID(t, out))
		for _, tr := range rec.Tasks {
			last := tr.Attempts[len(tr.Attempts)-1]
			if tr.State != fleet.Exited || last.Machine != "m3" {
				t.Fatalf("task %s: %s, last on %s", tr.Name, tr.State, last.Machine)
			}
			if lo := c.mustPostern(t, "runs", "logs", last.RunID); lo != "finished-"+tr.Name+"\n" {
				t.Fatalf("task %s's last run wrote %q", tr.Name, lo)
			}
		}
	})
}

// Container tasks through the built (static) binary and podman: each runs in
// a local container of the test's busybox image, walled by the container
// bridge, or with no network at all for network = "none"; a container task
// whose pool has no local machine is refused before anything starts.
func TestDispatchContainerTasks(t *testing.T) {
	ctrSetup(t)
	home := ctrHomeCopy(t)
	src := fmt.Sprintf(`per_machine = 2
task "boxed" {
  command   = ["sh", "-c", "test ! -e /usr/bin/curl && test -x /bin/busybox && echo in-image"]
  container = %q
}
task "sealed" {
  command   = ["cat", "/proc/net/dev"]
  container = %q
  network   = "none"
}
`, ctrImage, ctrImage)
	r := ctrDispatch(t, home, tasksFile(t, src))
	if r.Code != 0 {
		t.Fatalf("dispatch of container tasks: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	id := dispatchID(t, r.Stdout)
	lr := ctrPostern(t, home, "runs", "list", "--json", "--dispatch", id)
	var rs []records.Run
	if err := json.Unmarshal([]byte(lr.Stdout), &rs); err != nil || len(rs) != 2 {
		t.Fatalf("runs of the dispatch: %v: %s", err, lr.Stdout)
	}
	for _, run := range rs {
		logs := ctrPostern(t, home, "runs", "logs", run.ID)
		switch run.Task {
		case "boxed":
			if run.Lane != "local-container" || run.Carry != "container-bridge" || logs.Stdout != "in-image\n" {
				t.Fatalf("boxed: lane %s carry %s, wrote %q (%s)", run.Lane, run.Carry, logs.Stdout, logs.Stderr)
			}
		case "sealed":
			var ifaces []string
			for _, l := range strings.Split(logs.Stdout, "\n") {
				if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
					ifaces = append(ifaces, strings.TrimSpace(name))
				}
			}
			if run.Lane != "local-container" || run.Network != "none" || !slices.Equal(ifaces, []string{"lo"}) {
				t.Fatalf("sealed: lane %s network %q, interfaces %v in %q", run.Lane, run.Network, ifaces, logs.Stdout)
			}
		default:
			t.Fatalf("a run of no task of the file: %+v", run)
		}
	}

	// Refused: a container task whose pool is a remote machine only.
	if out := ctrPostern(t, home, "machine", "add", "far", "--ssh", "root@127.0.0.1:1"); out.Code != 0 {
		t.Fatalf("machine add: %s", out.Stderr)
	}
	bad := ctrDispatch(t, home, tasksFile(t, fmt.Sprintf("task \"away\" {\n  command = [\"true\"]\n  container = %q\n  machines = [\"far\"]\n}\n", ctrImage)))
	if bad.Code != 1 || !strings.Contains(bad.Stdout, "away refused: EGRESS-CLOSED-DEFAULT-REFUSED") {
		t.Fatalf("container task on a remote pool: exit %d\n%s\n%s", bad.Code, bad.Stdout, bad.Stderr)
	}
}

// A dispatch started in a git work tree: every task works in a copy of its
// own, local ones included (two local tasks side by side never see each
// other's files), and each result comes home as its own branch, with the
// caller's work tree left as it was.
func TestDispatchWorkspaces(t *testing.T) {
	f := newFleetLab(t, 1)
	c := f.C
	c.mustPostern(t, "machine", "probe-confinement", "local")
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(c.env(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "base.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "base.txt")
	git("commit", "-q", "-m", "base")
	step := `test -e base.txt && test ! -e out.txt && sleep 1 && test ! -e out.txt && echo "$WHO" > out.txt`
	src := "per_machine = 2\n"
	for _, who := range []string{"near1", "near2"} {
		src += fmt.Sprintf("task %q {\n  command = [\"sh\", \"-c\", %q]\n  machines = [\"local\"]\n  env = { WHO = %q }\n}\n", who, step, who)
	}
	src += fmt.Sprintf("task \"far\" {\n  command = [\"sh\", \"-c\", %q]\n  machines = [\"m1\"]\n  env = { WHO = \"far\" }\n}\n", step)
	tasks := filepath.Join(t.TempDir(), "tasks.hcl")
	if err := os.WriteFile(tasks, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binFor(t), "dispatch", tasks)
	cmd.Env, cmd.Dir = c.env(), repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dispatch in a work tree: %v\n%s", err, out)
	}
	t.Logf("dispatch in a work tree:\n%s", out)
	rec := dispatchRecord(t, c, dispatchID(t, string(out)))
	rs := dispatchRuns(t, c, rec.ID)
	if len(rs) != 3 {
		t.Fatalf("%d runs, want 3", len(rs))
	}
	local := 0
	for _, r := range rs {
		if r.Machine == "local" {
			local++
		}
	}
	if n := maxOverlap(rs, "local"); local != 2 || n != 2 {
		t.Fatalf("the two local tasks did not run side by side (%d local runs, %d at once)", local, n)
	}
	for _, tr := range rec.Tasks {
		if tr.State != fleet.Exited || tr.Branch == "" || !strings.HasPrefix(tr.Branch, "postern/") {
			t.Fatalf("task %s: %s, branch %q (%s)", tr.Name, tr.State, tr.Branch, tr.Why)
		}
		if got := git("show", tr.Branch+":out.txt"); got != tr.Name+"\n" {
			t.Fatalf("branch %s of task %s holds out.txt %q", tr.Branch, tr.Name, got)
		}
		if !regexp.MustCompile(`(?m)^` + tr.Name + `\s.*\s` + regexp.QuoteMeta(tr.Branch) + `\s`).Match(out) {
			t.Fatalf("the summary does not name task %s's branch %s:\n%s", tr.Name, tr.Branch, out)
		}
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Fatalf("the caller's work tree changed: %q", st)
	}
	if _, err := os.Stat(filepath.Join(repo, "out.txt")); err == nil {
		t.Fatal("a task wrote into the caller's work tree")
	}
}

// ctrDispatch runs the static postern's dispatch from a directory of its own,
// not inside this source tree (where each local task would get a copy of it).
func ctrDispatch(t *testing.T, home, tasks string) ctrRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrBin, "dispatch", tasks)
	cmd.Env = append(ctrEnv(), "POSTERN_HOME="+home)
	cmd.Dir = t.TempDir()
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := ctrRun{Stdout: o.String(), Stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("postern dispatch: %v", err)
	}
	return r
}
