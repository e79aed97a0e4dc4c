//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// On a remote, Landlock refuses a connect to a port outside the policy
// before the wall sees a packet; the refusal is recorded and printed all the
// same, as the wall's are locally: over OpenSSH's sshd, with curl and bash.
func TestRemotePortRefusalRecorded(t *testing.T) {
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	pol := r.policy(t)
	script := `curl -sS --max-time 5 http://upstream.test:8081/ >/dev/null 2>/tmp/err; echo "curl $?" >&2; cat /tmp/err >&2
bash -c 'exec 3<>/dev/tcp/` + r.Link.AddrB.String() + `/8082' 2>&1 | grep -q 'Permission denied' && echo "bash refused" >&2
bash -c 'exec 3<>/dev/udp/` + r.Link.AddrB.String() + `/8083' && echo "udp connected" >&2
python3 -c '
import socket, threading
def f():
    try:
        socket.create_connection(("` + r.Link.AddrB.String() + `", 8084), timeout=3)
    except PermissionError:
        print("thread refused")
t = threading.Thread(target=f); t.start(); t.join()' >&2
curl -sS --max-time 5 http://upstream.test/`
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("remote run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// Landlock refused: curl failed to connect (7), bash saw EACCES; and an
	// allowed port still reaches the upstream.
	if !strings.Contains(stderr, "curl 7") || !strings.Contains(stderr, "bash refused") || !strings.Contains(stderr, "thread refused") || !strings.Contains(stderr, "udp connected") {
		t.Fatalf("the connects were not refused by Landlock:\n%s", stderr)
	}
	var rep testhosts.EchoReply
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.ServedBy != "upstream" {
		t.Fatalf("the allowed request got %q (%v)", stdout, err)
	}
	// Printed as they happened, by name where the run used one.
	for _, want := range []string{
		"postern: the wall refused upstream.test:8081: port 8081 is not in the policy's ports [80]; Landlock refused the connect (EACCES) before the wall saw a packet",
		"postern: the wall refused " + r.Link.AddrB.String() + ":8082: port 8082 is not in the policy's ports [80]",
	} {
		if !strings.Contains(stderr, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// Recorded.
	run := lastRun(t, r.C)
	if run.Denied < 2 {
		t.Fatalf("run record counts %d denied", run.Denied)
	}
	out := r.C.mustPostern(t, "runs", "events", run.ID, "--json")
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev door.Event
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Kind != "wall" || ev.Decision != "deny" {
			continue
		}
		if strings.Contains(ev.Reason, "Landlock refused") {
			seen[ev.Host+":"+itoa(int(ev.Port))] = true
		}
	}
	// A connect from a thread of its own is seen too; a UDP connect is not
	// Landlock's to refuse, and sends nothing the wall could refuse.
	for _, want := range []string{"upstream.test:8081", r.Link.AddrB.String() + ":8082", r.Link.AddrB.String() + ":8084"} {
		if !seen[want] {
			t.Fatalf("no wall event for %s in the run's events:\n%s", want, out)
		}
	}
	if strings.Contains(out, "8083") {
		t.Fatalf("the UDP connect was recorded as refused:\n%s", out)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
