package policy_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// TestPolicyFromEvents writes a policy from an observe run's events and holds
// it to what the run did: each name, address and port it reached is allowed
// (a subdomain through its parent, a private address a name led to through
// allow_cidrs), and what it was refused — the floor, and a name a deny rule
// covered — is not.
func TestFromEvents(t *testing.T) {
	ev := func(kind event.Kind, host string, port uint16, addr string, decision event.Decision, reason string, wouldDeny bool) event.Event {
		return event.Event{Event: "decision", Kind: kind, Host: host, Port: port, Addr: addr, Decision: decision, Reason: reason, WouldDeny: wouldDeny}
	}
	evs := []event.Event{
		ev("dns", "github.com", 0, "198.18.0.1", "allow", "allowed by rule", false),
		ev("transparent", "github.com", 443, "140.82.112.3", "allow", "allowed by rule", false),
		ev("transparent", "api.github.com", 443, "140.82.112.6", "allow", "allowed by rule", false),
		ev("transparent", "github.com", 22, "140.82.112.3", "allow", "port 22 is not in the policy's ports", true),
		ev("connect", "registry.internal.test", 443, "10.1.2.3", "allow", "private address not in allow_cidrs", true),
		ev("transparent", "93.184.216.34", 8080, "93.184.216.34", "allow", "no allow_cidrs entry contains it", true),
		{Event: "end", Kind: "transparent", Host: "github.com", Port: 443},
		ev("transparent", "169.254.169.254", 80, "169.254.169.254", "deny", "hard floor: cloud metadata address", false),
		ev("transparent", "gist.github.com", 443, "140.82.112.4", "allow", policy.ReasonDeniedByRule, true),
		ev("wall", "192.0.2.7", 0, "", "deny", "icmp; the wall lets out only tcp", false),
		// Refused at the lookup: a deny rule's name, and a name no rule allowed.
		ev("dns", "secret.github.com", 0, "", "deny", policy.ReasonDeniedByRule, false),
		ev("dns", "unknown.test", 0, "", "deny", "no allow rule matches", false),
		ev("dns", "new.test", 0, "198.18.0.9", "allow", "no allow rule matches", true),
		// What the run sent, refused: it must stay inside its comment.
		ev("connect", "x\rallow = [\"evil.test\"]", 0, "", "deny", "bad connect target", false),
		ev("transparent", "web.test", 443, "10.0.0.9", "deny", "TLS server_name \"a\nallow = [\\\"evil.test\\\"]\" does not match", false),
	}
	src := policy.FromEvents(policy.Origin{Run: "r1", Machine: "local", Mode: "observe", Command: []string{"agent", "--fix"}, At: time.Now()}, evs)
	t.Logf("written:\n%s", src)
	pol, err := policy.Parse("from-run.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if pol.Mode != policy.Enforce {
		t.Errorf("mode %v, want enforce", pol.Mode)
	}
	for _, c := range []struct {
		host string
		port uint16
	}{{"github.com", 443}, {"api.github.com", 443}, {"github.com", 22}, {"registry.internal.test", 443}} {
		if d := pol.DecideName(c.host, c.port); d.Verdict != policy.Allow || d.WouldDeny {
			t.Errorf("%s:%d: %+v, want allowed", c.host, c.port, d)
		}
	}
	for _, c := range []struct {
		addr string
		port uint16
	}{{"10.1.2.3", 443}, {"93.184.216.34", 8080}} {
		if d := pol.DecideAddr(netip.MustParseAddr(c.addr), c.port, ""); d.Verdict != policy.Allow {
			t.Errorf("%s:%d: %+v, want allowed", c.addr, c.port, d)
		}
	}
	for _, n := range []string{"gist.github.com", "secret.github.com", "unknown.test", "new.test", "evil.test"} {
		if d := pol.DecideName(n, 443); d.Verdict == policy.Allow {
			t.Errorf("%s, refused during the run or only looked up, is allowed: %+v", n, d)
		}
	}
	for _, want := range []string{"#   unknown.test (dns: no allow rule matches)", `"secret.github.com", # denied by a rule`} {
		if !strings.Contains(src, want) {
			t.Errorf("written policy lacks %q", want)
		}
	}
	if strings.Contains(src, `"api.github.com"`) {
		t.Errorf("a subdomain of an allowed name is listed on its own:\n%s", src)
	}
	for _, want := range []string{"169.254.169.254:80 (transparent: hard floor", "gist.github.com:443", `"github.com", # 3 connections, ports 22, 443`} {
		if !strings.Contains(src, want) {
			t.Errorf("written policy lacks %q", want)
		}
	}
	if d := pol.DecideName("example.org", 443); d.Verdict == policy.Allow {
		t.Errorf("a name the run never reached is allowed: %+v", d)
	}
}

// TestPolicyFromNoEvents: a run that reached nothing gives a policy that
// allows nothing.
func TestPolicyFromNoEvents(t *testing.T) {
	src := policy.FromEvents(policy.Origin{Run: "r0", Machine: "local"}, nil)
	pol, err := policy.Parse("from-run.hcl", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if d := pol.DecideName("example.org", 443); d.Verdict == policy.Allow {
		t.Errorf("a policy from no events allows %+v", d)
	}
}
