package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

const scenarioFile = `
per_machine = 2
machine "box" { per_machine = 1 }

task "fix-auth" { command = ["my-agent", "fix the failing auth test"] }
task "docs" {
  command  = ["my-agent", "update the docs"]
  machines = ["box"]
}
task "train" {
  command = ["python", "train.py"]
  needs   = ["gpu"]
}
task "lint" { command = ["make", "lint"] }
task "flaky" { command = ["make", "test"] }
task "on-fresh" {
  command  = ["true"]
  machines = ["fresh"]
}
task "later" { command = ["true"] }
`

// scenario is a dispatch that meets every state: it returns the record's
// frames at the moments a person would look, and every change.
type scenario struct {
	s      *sched
	frames map[string]*Record
	at     map[string]time.Time
}

func runScenario(t *testing.T) *scenario {
	t.Helper()
	f := mustParse(t, scenarioFile)
	machines := []Machine{withGPU(walled("gpu1")), walled("gpu2"), walled("box"), unmeasured("fresh")}
	s, err := newSched("20260314-092653-a1b2c3", f, machines, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{s: s, frames: map[string]*Record{}, at: map[string]time.Time{}}
	ids := map[string]int{}
	place := func(at time.Duration) {
		for _, a := range s.place(t0.Add(at)) {
			ids[a.Task.Name] = a.ID
		}
	}
	ev := func(at time.Duration, task string, e RunEvent) {
		e.Attempt = ids[task]
		if _, known := s.handle(e, t0.Add(at)); !known {
			t.Fatalf("%s: event %+v not taken", task, e)
		}
		place(at)
	}
	snap := func(name string, at time.Duration) {
		sc.frames[name] = s.rec.Clone()
		sc.at[name] = t0.Add(at)
	}
	sec := time.Second
	place(0)
	snap("placed", 0)
	for _, task := range []string{"fix-auth", "docs", "train", "lint", "flaky"} {
		ev(sec, task, RunEvent{Kind: RunStarted, RunID: "20260314-0926" + task})
	}
	ev(5*sec, "fix-auth", RunEvent{Kind: RunDenied, Denial: Denial{Kind: "transparent", Host: "evil.example", Port: 443,
		Reason: `evil.example is not in the policy's allow list; to allow it add "evil.example" to allow in policies/agent.hcl`}})
	ev(6*sec, "lint", RunEvent{Kind: RunDenied, Denial: Denial{Kind: "dns", Host: "tracker.example\x1b[31m", Reason: "not allowed", Repeats: 2}})
	snap("running", 13*sec)
	ev(20*sec, "lint", RunEvent{Kind: RunLost, Err: errors.New("ssh: connection to gpu2 lost: EOF")})
	ev(20*sec, "flaky", RunEvent{Kind: RunLost, Err: errors.New("ssh: connection to gpu2 lost: EOF")})
	snap("lost", 21*sec)
	ev(42*sec, "fix-auth", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/20260314-0926fix-auth"})
	ev(43*sec, "lint", RunEvent{Kind: RunStarted, RunID: "20260314-0927lint"})
	ev(50*sec, "docs", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/20260314-0926docs"})
	ev(51*sec, "flaky", RunEvent{Kind: RunStarted, RunID: "20260314-0927flaky"})
	ev(65*sec, "flaky", RunEvent{Kind: RunExited, Code: 3, Branch: "postern/20260314-0927flaky"})
	ev(66*sec, "later", RunEvent{Kind: RunFailed, Err: errors.New("ship the workspace: git bundle: exit status 128")})
	snap("busy", 70*sec)
	ev(125*sec, "train", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/20260314-0926train"})
	ev(130*sec, "lint", RunEvent{Kind: RunExited, Code: 0})
	s.finish(t0.Add(130 * sec))
	snap("ended", 130*sec)
	return sc
}

func TestFrames(t *testing.T) {
	sc := runScenario(t)
	for _, name := range []string{"placed", "running", "lost", "busy", "ended"} {
		t.Run(name, func(t *testing.T) {
			lines := Frame(sc.frames[name], sc.at[name], 120, 40)
			golden(t, "frame-"+name, strings.Join(lines, "\n")+"\n")
			for _, l := range lines {
				if n := len([]rune(l)); n >= 120 {
					t.Errorf("line of %d runes in 120 columns: %q", n, l)
				}
				if strings.ContainsRune(l, '\x1b') {
					t.Errorf("escape byte in a frame line: %q", l)
				}
			}
		})
	}
	// Narrow and short: lines cut, and the tasks that do not fit counted.
	lines := Frame(sc.frames["busy"], sc.at["busy"], 60, 7)
	golden(t, "frame-busy-small", strings.Join(lines, "\n")+"\n")
	if len(lines) > 6 {
		t.Errorf("%d lines for a terminal of 7 rows", len(lines))
	}
}

func TestPlainAndJSONLines(t *testing.T) {
	sc := runScenario(t)
	var plain, js bytes.Buffer
	for _, c := range sc.s.out {
		plain.WriteString(PlainLine(c) + "\n")
		js.Write(JSONLine(c))
	}
	golden(t, "plain", plain.String())
	golden(t, "json", js.String())
	if strings.ContainsRune(plain.String(), '\x1b') {
		t.Error("an escape byte a run chose reached the plain lines")
	}
}

func TestTable(t *testing.T) {
	sc := runScenario(t)
	golden(t, "table", Table(sc.frames["ended"]))
	if ExitCode(sc.frames["ended"]) != 1 {
		t.Errorf("exit %d", ExitCode(sc.frames["ended"]))
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0 s", 50 * time.Millisecond: "0.05 s", 999 * time.Millisecond: "1 s", 12 * time.Second: "12 s",
		41*time.Second + 900*time.Millisecond: "41 s", 125 * time.Second: "2 m 5 s", 3*time.Hour + 4*time.Minute + 5*time.Second: "3 h 4 m",
		-time.Second: "0 s",
	} {
		if got := dur(d); got != want {
			t.Errorf("dur(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestFrameUnbounded(t *testing.T) {
	sc := runScenario(t)
	r := sc.frames["busy"]
	lines := Frame(r, sc.at["busy"], 0, 0)
	if len(lines) != 2+len(r.Tasks) || !strings.Contains(lines[7], "fresh: lane remote-linux") {
		t.Errorf("unbounded frame:\n%s", strings.Join(lines, "\n"))
	}
}

// The record is what the records keep: it survives JSON whole, in the
// shape pinned here.
func TestRecordJSON(t *testing.T) {
	sc := runScenario(t)
	r := sc.frames["ended"]
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "record", string(b)+"\n")
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, r) {
		t.Errorf("record changed through JSON:\n%+v\n%+v", &back, r)
	}
	c := r.Clone()
	c.Tasks[0].Attempts[0].Machine = "changed"
	*c.Tasks[0].Exit = 99
	c.Summary.Exited = 99
	c.Tasks[0].Spec.Command[0] = "changed"
	if r.Tasks[0].Attempts[0].Machine == "changed" || *r.Tasks[0].Exit == 99 || r.Summary.Exited == 99 || r.Tasks[0].Spec.Command[0] == "changed" {
		t.Error("Clone shares memory with the record")
	}
}
