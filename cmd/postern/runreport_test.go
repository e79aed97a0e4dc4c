package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/records"
)

// With --json every line postern writes is one object with an event key,
// whatever wrote it: a denial (what the run chose, escaped), a warning
// written in pieces, the log, the end.
func TestRunReportJSONLines(t *testing.T) {
	var b bytes.Buffer
	r := newRunReport(&b, true, false)
	code := 3
	r.start(&records.Run{ID: "r1", Machine: "local", Lane: "local-linux", Carry: "network-wall", Policy: "p.hcl", Mode: "enforce"})
	r.event(door.Event{Event: "decision", Decision: "deny", Kind: "connect", Host: "x\x1b]0;pwned\a", Port: 443, Reason: "no allow rule matches", Run: "r1"})
	r.event(door.Event{Event: "decision", Decision: "allow", Kind: "connect", Host: "ok.test", Port: 443, Run: "r1"})
	w := r.warnings()
	fmt.Fprint(w, "postern: run r1: its processes ")
	fmt.Fprint(w, "are not limited\npostern: second\n")
	r.logger().Warn("run teardown", "run", "r1")
	r.end(&records.Run{ID: "r1", State: records.StateExited, ExitCode: &code, Denied: 1}, nil, 3, records.EndExited, 1500*time.Millisecond)

	var events []string
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q (%v)\n%s", line, err, b.String())
		}
		ev, _ := m["event"].(string)
		events = append(events, ev)
		switch ev {
		case "denial":
			if m["target"] != `"x\x1b]0;pwned\a:443"` || m["id"] != "r1" {
				t.Errorf("denial %v: want the target escaped", m)
			}
		case "warning":
			if msg := m["message"]; msg != "run r1: its processes are not limited" && msg != "second" {
				t.Errorf("warning %v", m)
			}
		case "end":
			if m["exit"] != 3.0 || m["exit_code"] != 3.0 || m["why"] != "exited" || m["duration_ms"] != 1500.0 || m["denials"] != 1.0 || m["error"] != "" {
				t.Errorf("end %v", m)
			}
		}
	}
	if got, want := strings.Join(events, ","), "start,denial,warning,warning,log,end"; got != want {
		t.Errorf("events %s, want %s\n%s", got, want, b.String())
	}
	if strings.ContainsRune(b.String(), 0x1b) {
		t.Errorf("a raw escape reached stderr: %q", b.String())
	}

	// A failure with no run: the end object still has every key.
	b.Reset()
	newRunReport(&b, true, true).end(nil, errors.New(`machine "x" is not known`), exitPostern, records.EndStartFailed, 0)
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["id"] != "" || m["exit_code"] != nil || m["why"] != "start-failed" || m["error"] != `machine "x" is not known` {
		t.Errorf("end without a run: %s (%v)", b.String(), err)
	}
	if _, ok := m["exit_code"]; !ok {
		t.Errorf("end without a run has no exit_code key: %s", b.String())
	}
}

// Without --json, -q leaves the person the warnings and nothing else.
func TestRunReportQuiet(t *testing.T) {
	var b bytes.Buffer
	r := newRunReport(&b, false, true)
	r.start(&records.Run{ID: "r1", Machine: "local", Carry: "network-wall"})
	r.event(door.Event{Event: "decision", Decision: "deny", Kind: "dns", Host: "x.test", Reason: "no allow rule matches"})
	fmt.Fprintln(r.warnings(), "postern: a warning")
	r.end(&records.Run{ID: "r1", Denied: 1}, nil, 0, records.EndExited, time.Second)
	if b.String() != "postern: a warning\n" {
		t.Errorf("-q wrote %q", b.String())
	}
	b.Reset()
	r = newRunReport(&b, false, false)
	r.start(&records.Run{ID: "r1", Machine: "gpu1", Carry: "network-wall"})
	if b.String() != "postern: run r1 on gpu1 (network-wall)\n" {
		t.Errorf("start line %q", b.String())
	}
}
