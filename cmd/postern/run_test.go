package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door"
)

// printDenial says in one line what was refused, and what the run chose to
// send (a malformed target, a TLS server_name) cannot act on the terminal.
func TestPrintDenial(t *testing.T) {
	for _, c := range []struct {
		ev   door.Event
		want string
	}{
		{door.Event{Event: "decision", Kind: "transparent", Host: "evil.test", Port: 443, Decision: "deny", Reason: "not allowed"},
			"postern: denied transparent evil.test:443: not allowed\n"},
		{door.Event{Event: "decision", Kind: "wall", Host: "10.0.0.1", Port: 8080, Decision: "deny", Reason: "port 8080 is not in the policy's ports"},
			"postern: the wall refused 10.0.0.1:8080: port 8080 is not in the policy's ports\n"},
		{door.Event{Event: "decision", Kind: "connect", Host: "x\x1b]0;pwned\a", Decision: "deny", Reason: "server_name \x1b[2J does not match"},
			`postern: denied connect "x\x1b]0;pwned\a": "server_name \x1b[2J does not match"` + "\n"},
		{door.Event{Event: "decision", Kind: "connect", Host: "ok.test", Port: 443, Decision: "allow"}, ""},
		{door.Event{Event: "decision", Kind: "dns", Host: "x.evil.test", Decision: "deny", Reason: "not allowed", Repeats: 12},
			"postern: denied dns x.evil.test (and 12 more like it in the second before): not allowed\n"},
	} {
		var b bytes.Buffer
		printDenial(&b, c.ev)
		if b.String() != c.want {
			t.Errorf("printDenial(%+v) = %q, want %q", c.ev, b.String(), c.want)
		}
		if strings.ContainsAny(b.String(), "\x1b\a") {
			t.Errorf("control characters reached the terminal: %q", b.String())
		}
	}
}

// The events table shows what the run sent as printable text too.
func TestEventRowPrintable(t *testing.T) {
	row := eventRow(door.Event{Event: "decision", Kind: "connect", Host: "x\x1b]0;t\a", Decision: "deny", Reason: "bad \x1b[2J"})
	if strings.ContainsAny(row, "\x1b\a") || !strings.Contains(row, `"x\x1b]0;t\a"`) {
		t.Errorf("eventRow = %q", row)
	}
}
