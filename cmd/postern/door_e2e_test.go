//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// policyFor renders a policy that opens the lab's web host's /24 by CIDR, so
// names pinned or resolved there can be reached.
func (l *e2eLab) policyFor(mode string, allow, deny []string) string {
	q := func(ss []string) string {
		if len(ss) == 0 {
			return "[]"
		}
		return `["` + strings.Join(ss, `", "`) + `"]`
	}
	return fmt.Sprintf("mode = %q\nports = [80, 443]\nallow = %s\ndeny = %s\nallow_cidrs = [%q]\n",
		mode, q(allow), q(deny), l.Web.Prefix.String())
}

func proxyURL(d *doorProc) string { return "http://" + d.Addr }

func TestDoorAllowsListedNameOverConnectAndHTTP(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, nil), "", l.Resolver(), Pin("web.test", l.Web.Addr))

	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://web.test/hello")
	if r.Code != 0 || r.HTTP != 200 || r.Connect != 200 {
		t.Fatalf("https through the door: %+v", r)
	}
	rep := echo(t, r.Body)
	if rep.ServedBy != "web" || rep.SNI != "web.test" || rep.URI != "/hello" {
		t.Fatalf("reached %+v", rep)
	}
	ev := d.decision(t, "web.test", 443)
	want := l.Web.Addr.String()
	if ev.Kind != "connect" || ev.Decision != "allow" || ev.Mode != "enforce" || ev.Reason != "allowed by rule" ||
		!strings.Contains(ev.Rule, "web.test") || ev.Addr != want || ev.WouldDeny {
		t.Fatalf("decision event %+v, want allow of web.test:443 at %s by rule web.test", ev, want)
	}
	end := d.end(t, ev.Conn)
	if end.BytesUp == 0 || end.BytesDown < int64(len(r.Body)) || end.Kind != "connect" {
		t.Fatalf("end event %+v after a %d-byte body", end, len(r.Body))
	}

	// Absolute-URI HTTP through the same door.
	r = curl(t, "--proxy", proxyURL(d), "http://web.test/plain")
	if r.Code != 0 || r.HTTP != 200 {
		t.Fatalf("http through the door: %+v", r)
	}
	if rep := echo(t, r.Body); rep.ServedBy != "web" || rep.Host != "web.test" || rep.URI != "/plain" || rep.TLS {
		t.Fatalf("reached %+v", rep)
	}
	ev = d.decision(t, "web.test", 80)
	if ev.Kind != "http" || ev.Decision != "allow" || ev.Addr != l.Web.Addr.String() {
		t.Fatalf("http decision %+v", ev)
	}
	// The door, not the client, connected: the host saw the root side of its link.
	if !strings.HasPrefix(rep.Remote, l.Web.Gateway.String()+":") {
		t.Fatalf("host saw client %s, want %s", rep.Remote, l.Web.Gateway)
	}
}

func TestDoorAllowsSubdomainOfListedName(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, nil), "", l.Resolver(), Pin("api.web.test", l.Web.Addr))
	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://api.web.test/")
	if r.Code != 0 || r.HTTP != 200 {
		t.Fatalf("subdomain through the door: %+v", r)
	}
	if rep := echo(t, r.Body); rep.SNI != "api.web.test" {
		t.Fatalf("reached %+v", rep)
	}
	ev := d.decision(t, "api.web.test", 443)
	if ev.Decision != "allow" || !strings.Contains(ev.Rule, "web.test") {
		t.Fatalf("decision %+v, want allow by rule web.test", ev)
	}
}

func TestDoorDenyWinsOverAllow(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, []string{"secret.web.test"}), "",
		l.Resolver(), Pin("secret.web.test", l.Web.Addr))
	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://secret.web.test/")
	if r.Connect != 403 || r.Code == 0 {
		t.Fatalf("denied CONNECT: %+v", r)
	}
	ev := d.decision(t, "secret.web.test", 443)
	if ev.Decision != "deny" || ev.Reason != "denied by rule" || !strings.Contains(ev.Rule, "secret.web.test") || ev.Addr != "" {
		t.Fatalf("decision %+v", ev)
	}
	// Plain HTTP: the 403 body says what was denied and that no allow overrides it.
	r = curl(t, "--proxy", proxyURL(d), "http://secret.web.test/")
	if r.HTTP != 403 || !strings.Contains(r.Body, "secret.web.test") || !strings.Contains(r.Body, "no allow line overrides a deny rule") {
		t.Fatalf("denied GET: %+v", r)
	}
	// The same words on a refused CONNECT.
	raw := rawRequest(t, d.Addr, "CONNECT secret.web.test:443 HTTP/1.1", "Host: secret.web.test:443")
	if raw.Status != 403 || !strings.Contains(raw.Body, "denied by rule") || !strings.Contains(raw.Body, d.Policy) {
		t.Fatalf("CONNECT refusal %+v", raw)
	}
	if l.DNS.Asked("secret.web.test") {
		t.Fatal("a denied name was looked up")
	}
}

func TestDoorLiteralAddressesAndAllowCIDRs(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", nil, nil), "", l.Resolver())

	// Inside allow_cidrs: reached.
	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), fmt.Sprintf("https://%s/", l.Web.Addr))
	if r.Code != 0 || r.HTTP != 200 || echo(t, r.Body).ServedBy != "web" {
		t.Fatalf("literal inside allow_cidrs: %+v", r)
	}
	ev := d.decision(t, l.Web.Addr.String(), 443)
	if ev.Decision != "allow" || ev.Reason != "allowed by allow_cidrs" || !strings.Contains(ev.Rule, l.Web.Prefix.String()) {
		t.Fatalf("decision %+v", ev)
	}

	// Outside: refused, and the body names the CIDR line that would open it.
	r = curl(t, "--proxy", proxyURL(d), fmt.Sprintf("http://%s/", l.Other.Addr))
	if r.HTTP != 403 || !strings.Contains(r.Body, "allow_cidrs") || !strings.Contains(r.Body, l.Other.Addr.String()) {
		t.Fatalf("literal outside allow_cidrs: %+v", r)
	}
	ev = d.decision(t, l.Other.Addr.String(), 80)
	if ev.Decision != "deny" || ev.Reason != "private address not in allow_cidrs" {
		t.Fatalf("decision %+v", ev)
	}
	r = curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), fmt.Sprintf("https://%s/", l.Other.Addr))
	if r.Connect != 403 {
		t.Fatalf("CONNECT outside allow_cidrs: %+v", r)
	}
}

func TestDoorNameResolvingToUnlistedPrivateAddress(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	// inside.test and sneaky.test are allowed by name; both point at the other
	// host, whose /24 the policy does not list. A name allow never opens a
	// private address.
	pol := l.policyFor("enforce", []string{"inside.test", "sneaky.test"}, nil)
	d := startDoor(t, pol, "", l.Resolver(), Pin("inside.test", l.Other.Addr))

	for _, name := range []string{"inside.test" /* by pin */, "sneaky.test" /* by the lab's DNS */} {
		r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://"+name+"/")
		if r.Connect != 403 {
			t.Fatalf("%s: %+v", name, r)
		}
		ev := d.decision(t, name, 443)
		if ev.Decision != "deny" || ev.Reason != "private address not in allow_cidrs" || ev.Addr != l.Other.Addr.String() {
			t.Fatalf("%s: decision %+v, want deny naming %s", name, ev, l.Other.Addr)
		}
		raw := rawRequest(t, d.Addr, "GET http://"+name+"/ HTTP/1.1", "Host: "+name)
		if raw.Status != 403 || !strings.Contains(raw.Body, l.Other.Addr.String()) || !strings.Contains(raw.Body, "allow_cidrs") {
			t.Fatalf("%s: refusal %+v", name, raw)
		}
	}
	if !l.DNS.Asked("sneaky.test") || l.DNS.Asked("inside.test") {
		t.Fatalf("lookups %q: want sneaky.test asked and the pinned inside.test not", l.DNS.Queries())
	}
}

func TestDoorRefusesMetadataAndLoopbackInEverySpelling(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	// A live listener on loopback: if any spelling slipped through, it would
	// be accepted here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	pol := fmt.Sprintf("mode = \"observe\"\nports = [80, 443, %d]\nallow = [\"meta.test\"]\nallow_cidrs = [\"0.0.0.0/0\", \"::/0\"]\n", port)
	d := startDoor(t, pol, "", l.Resolver(), Pin("meta.test", netip.MustParseAddr("169.254.169.254")), Pin("lo.test", netip.MustParseAddr("127.0.0.1")))

	// Observe mode and allow_cidrs 0.0.0.0/0 open everything but the floor.
	for _, tc := range []struct{ target, reason string }{
		{"169.254.169.254:80", "hard floor: cloud metadata address"},
		{"meta.test:80", "hard floor: cloud metadata address"},
		{"lo.test:80", "hard floor: loopback"},
	} {
		raw := rawRequest(t, d.Addr, "CONNECT "+tc.target+" HTTP/1.1", "Host: "+tc.target)
		if raw.Status != 403 || !strings.Contains(raw.Body, "hard floor") || !strings.Contains(raw.Body, "no policy opens") {
			t.Errorf("CONNECT %s: %+v", tc.target, raw)
		}
		host, _, _ := strings.Cut(tc.target, ":")
		ev := d.decision(t, host, 80)
		if ev.Decision != "deny" || ev.Reason != tc.reason || ev.WouldDeny {
			t.Errorf("CONNECT %s: event %+v, want deny %q", tc.target, ev, tc.reason)
		}
	}
	r := curl(t, "--proxy", proxyURL(d), "http://169.254.169.254/latest/meta-data/")
	if r.HTTP != 403 || !strings.Contains(r.Body, "cloud metadata") {
		t.Errorf("GET metadata: %+v", r)
	}

	spellings := []string{"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "[::1]", "[::ffff:127.0.0.1]", "0x7f000001", "127.000.000.001"}
	for _, s := range spellings {
		target := fmt.Sprintf("%s:%d", s, port)
		for _, req := range [][]string{
			{"CONNECT " + target + " HTTP/1.1", "Host: " + target},
			{"GET http://" + target + "/ HTTP/1.1", "Host: " + target},
		} {
			raw := rawRequest(t, d.Addr, req...)
			if raw.Status != 403 || !strings.Contains(raw.Body, "hard floor") {
				t.Errorf("%s: %d %q", req[0], raw.Status, raw.Body)
			}
		}
	}
	// Through curl too (curl may normalise the spelling; the door must refuse
	// whatever arrives).
	for _, s := range []string{"127.0.0.1", "2130706433", "0x7f.1", "[::1]"} {
		r := curl(t, "--proxy", proxyURL(d), "-p", fmt.Sprintf("http://%s:%d/", s, port))
		if r.Connect != 403 {
			t.Errorf("curl -p %s: %+v", s, r)
		}
	}
	var floorDenials int
	for _, ev := range d.Events() {
		if ev.Event == "decision" && ev.Port == uint16(port) {
			if ev.Decision != "deny" || !strings.HasPrefix(ev.Reason, "hard floor: loopback") {
				t.Errorf("loopback spelling %q: event %+v", ev.Host, ev)
			}
			floorDenials++
		}
	}
	if want := 2*len(spellings) + 4; floorDenials != want {
		t.Errorf("%d loopback decisions recorded, want %d", floorDenials, want)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections through the door", n)
	}
}

func TestDoorRefusesItsOwnAddress(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	// The door listens on the root side of the web host's link, inside a CIDR
	// the policy opens: its own address must still be refused.
	pol := l.policyFor("enforce", nil, nil)
	d := startDoor(t, pol, net.JoinHostPort(l.Web.Gateway.String(), "0"), l.Resolver())
	_, port, _ := net.SplitHostPort(d.Addr)
	raw := rawRequest(t, d.Addr, "CONNECT "+d.Addr+" HTTP/1.1", "Host: "+d.Addr)
	if raw.Status != 403 || !strings.Contains(raw.Body, "own address") {
		t.Fatalf("CONNECT to the door itself: %+v", raw)
	}
	ev := d.waitEvent(t, "self decision", func(ev door.Event) bool { return ev.Event == "decision" && ev.Host == l.Web.Gateway.String() })
	if ev.Decision != "deny" || ev.Reason != "hard floor: the door's own address" {
		t.Fatalf("event %+v (port %s)", ev, port)
	}
	// The web host next to it, same CIDR, is reachable: the refusal was the floor's.
	r := curl(t, "--proxy", "http://"+d.Addr, fmt.Sprintf("http://%s/", l.Web.Addr))
	if r.HTTP != 200 {
		t.Fatalf("neighbour in the same CIDR: %+v", r)
	}
}

func TestDoorRefusesSNIThatDiffersFromConnect(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, nil), "", l.Resolver(), Pin("web.test", l.Web.Addr))
	// curl asks the door for web.test:443 but says other.test in its TLS hello
	// (the web host's certificate covers both, so only the door can refuse).
	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "--connect-to", "other.test:443:web.test:443", "https://other.test/")
	if r.Code == 0 || r.HTTP == 200 {
		t.Fatalf("fronted request got through: %+v", r)
	}
	if r.Connect != 200 {
		t.Fatalf("CONNECT web.test itself should have been admitted: %+v", r)
	}
	ev := d.waitEvent(t, "sni refusal", func(ev door.Event) bool {
		return ev.Event == "decision" && ev.Decision == "deny" && ev.Host == "web.test"
	})
	if !strings.Contains(ev.Reason, "tls sni other.test does not match admitted host web.test") {
		t.Fatalf("event %+v", ev)
	}
	end := d.end(t, ev.Conn)
	if end.BytesUp != 0 {
		t.Fatalf("client bytes reached the upstream after an SNI refusal: %+v", end)
	}
}

func TestDoorRefusesPortSmuggling(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	// An SSH-like server on a port the policy does not list.
	if _, err := l.Web.ServeTCPEcho(22); err != nil {
		t.Fatal(err)
	}
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, nil), "", l.Resolver(), Pin("web.test", l.Web.Addr))

	raw := rawRequest(t, d.Addr, "CONNECT web.test:22 HTTP/1.1", "Host: web.test:22")
	if raw.Status != 403 || !strings.Contains(raw.Body, "port 22") {
		t.Fatalf("CONNECT to an unlisted port: %+v", raw)
	}
	if ev := d.decision(t, "web.test", 22); ev.Decision != "deny" || ev.Reason != "port 22 is not in the policy's ports" {
		t.Fatalf("event %+v", ev)
	}
	for _, req := range [][]string{
		{"CONNECT web.test:443:22 HTTP/1.1", "Host: web.test"},
		{"CONNECT web.test:22#:443 HTTP/1.1", "Host: web.test"},
		{"CONNECT evil.test:22.web.test:443 HTTP/1.1", "Host: web.test"},
		{"GET http://web.test:22/ HTTP/1.1", "Host: web.test:22"},
		{"GET http://web.test:80@evil.test:22/ HTTP/1.1", "Host: evil.test:22"},
		// The request target says web.test; the Host header says another host.
		{"GET http://web.test/ HTTP/1.1", "Host: evil.test"},
	} {
		raw := rawRequest(t, d.Addr, req...)
		if raw.Status != 403 && raw.Status != 400 {
			t.Errorf("%q: status %d %q", req, raw.Status, raw.Body)
		}
	}
	// Inside an admitted tunnel, an HTTP request for another host is refused
	// before it reaches the upstream.
	r := curl(t, "--proxy", proxyURL(d), "-p", "-H", "Host: evil.test", "http://web.test/")
	if r.Connect != 200 || r.HTTP == 200 {
		t.Fatalf("tunnelled request with a foreign Host: %+v", r)
	}
	ev := d.waitEvent(t, "http host refusal", func(ev door.Event) bool {
		return ev.Event == "decision" && ev.Decision == "deny" && ev.Host == "web.test" && ev.Port == 80
	})
	if !strings.Contains(ev.Reason, "http host evil.test does not match") {
		t.Fatalf("event %+v", ev)
	}
	// A later request on a tunnel whose first request was for the admitted
	// host is held to that host too: curl keeps the tunnel between the two.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wo := "%{http_code} %{num_connects}\n"
	cmd := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "10", "-p", "--proxy", proxyURL(d), "-o", "/dev/null", "-w", wo, "http://web.test/first",
		"--next", "-sS", "--max-time", "10", "-p", "--proxy", proxyURL(d), "-o", "/dev/null", "-w", wo, "-H", "Host: evil.test", "http://web.test/second")
	cmd.Env = curlEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("curl, two requests on one tunnel: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 4 || got[0] != "200" || got[2] != "403" || got[3] != "0" {
		t.Fatalf("two requests on one tunnel, the second for another host: %q, want 200 then 403 on the same connection", out)
	}
	d.waitEvent(t, "the second request's refusal", func(ev door.Event) bool {
		return ev.Event == "decision" && ev.Kind == "connect" && ev.Decision == "deny" && strings.Contains(ev.Reason, "http host evil.test does not match")
	})
	for _, ev := range d.Events() {
		if ev.Event == "decision" && ev.Decision == "allow" && (ev.Port == 22 || strings.Contains(ev.Host, "evil")) {
			t.Fatalf("smuggled destination admitted: %+v", ev)
		}
	}
}

func TestDoorObserveModeAllowsAndRecords(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("observe", []string{"web.test"}, []string{"secret.web.test"}), "",
		l.Resolver(), Pin("api2.test", l.Web.Addr), Pin("secret.web.test", l.Web.Addr))
	for _, name := range []string{"api2.test", "secret.web.test"} {
		r := curl(t, "--proxy", proxyURL(d), "http://"+name+"/")
		if r.HTTP != 200 || echo(t, r.Body).ServedBy != "web" {
			t.Fatalf("observe mode %s: %+v", name, r)
		}
	}
	ev := d.decision(t, "api2.test", 80)
	if ev.Decision != "allow" || !ev.WouldDeny || ev.Mode != "observe" || ev.Reason != "no allow rule matches" {
		t.Fatalf("unlisted name in observe mode: %+v", ev)
	}
	ev = d.decision(t, "secret.web.test", 80)
	if ev.Decision != "allow" || !ev.WouldDeny || ev.Reason != "denied by rule" {
		t.Fatalf("denied name in observe mode: %+v", ev)
	}
	// The floor holds in observe mode too.
	r := curl(t, "--proxy", proxyURL(d), "http://169.254.169.254/")
	if r.HTTP != 403 {
		t.Fatalf("metadata in observe mode: %+v", r)
	}
}

func TestDoorNeverResolvesDeniedNames(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newE2ELab(t)
	d := startDoor(t, l.policyFor("enforce", []string{"web.test"}, []string{"leak.test"}), "", l.Resolver())

	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://web.test/")
	if r.HTTP != 200 || echo(t, r.Body).SNI != "web.test" {
		t.Fatalf("allowed name via the lab's DNS: %+v", r)
	}
	for _, name := range []string{"leak.test", "other.test", "unlisted-secret-payload.test"} {
		if r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://"+name+"/"); r.Connect != 403 {
			t.Fatalf("%s: %+v", name, r)
		}
		if r := curl(t, "--proxy", proxyURL(d), "http://"+name+"/"); r.HTTP != 403 {
			t.Fatalf("%s over http: %+v", name, r)
		}
		ev := d.decision(t, name, 443)
		if ev.Decision != "deny" || ev.Addr != "" {
			t.Fatalf("%s: %+v", name, ev)
		}
	}
	// Give any stray lookup time to arrive before judging the log.
	time.Sleep(200 * time.Millisecond)
	q := l.DNS.Queries()
	if !l.DNS.Asked("web.test") {
		t.Fatalf("the allowed name never reached the resolver: %q", q)
	}
	for _, name := range q {
		if name != "web.test" {
			t.Fatalf("the resolver was asked %q: %q", name, q)
		}
	}
}

func TestPolicyCheckExitCodesAndJSON(t *testing.T) {
	testhosts.EndToEnd(t)
	pol := writeFile(t, "p.hcl", `mode = "enforce"
ports = [80, 443]
allow = ["github.com"]
deny = ["gist.github.com"]
allow_cidrs = ["10.20.0.0/16"]
`)
	out, _, code := runPostern(t, "policy", "check", "--policy", pol, "github.com", "api.github.com:80", "10.20.1.2")
	if code != 0 || !strings.Contains(out, "api.github.com:80") || !strings.Contains(out, "allow") {
		t.Fatalf("all allowed: code %d\n%s", code, out)
	}
	out, _, code = runPostern(t, "policy", "check", "--policy", pol, "github.com", "gist.github.com")
	if code != 1 || !strings.Contains(out, "denied by rule") {
		t.Fatalf("one denied: code %d\n%s", code, out)
	}

	out, _, code = runPostern(t, "policy", "check", "--policy", pol, "--json",
		"github.com", "gist.github.com", "example.org", "127.0.0.1", "2130706433:443", "10.99.0.1", "github.com:22")
	if code != 1 {
		t.Fatalf("--json with denials: code %d\n%s", code, out)
	}
	var got []struct {
		Target, Host, Decision, Reason, Rule, Suggest string
		Port                                          uint16
		WouldDeny                                     bool `json:"would_deny"`
	}
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	want := []struct{ decision, reason string }{
		{"allow", "allowed by rule"},
		{"deny", "denied by rule"},
		{"deny", "no allow rule matches"},
		{"deny", "hard floor: loopback"},
		{"deny", "hard floor: loopback"},
		{"deny", "private address not in allow_cidrs"},
		{"deny", "port 22 is not in the policy's ports"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Decision != w.decision || got[i].Reason != w.reason {
			t.Errorf("%s: %s %q, want %s %q", got[i].Target, got[i].Decision, got[i].Reason, w.decision, w.reason)
		}
	}
	if got[0].Port != 443 || !strings.Contains(got[0].Rule, "github.com") {
		t.Errorf("github.com: %+v", got[0])
	}
	if !strings.Contains(got[2].Suggest, "example.org") {
		t.Errorf("no suggestion naming example.org: %+v", got[2])
	}
	if got[4].Host != "127.0.0.1" {
		t.Errorf("2130706433 canonicalised to %q", got[4].Host)
	}

	// Observe mode: allowed but recorded as would-deny.
	obs := writeFile(t, "o.hcl", "mode = \"observe\"\nallow = [\"github.com\"]\n")
	out, _, code = runPostern(t, "policy", "check", "--policy", obs, "--json", "example.org")
	if code != 0 || !strings.Contains(out, `"would_deny": true`) {
		t.Fatalf("observe: code %d\n%s", code, out)
	}

	// Bad input: exit 2 with a message naming the problem and its position.
	bad := writeFile(t, "bad.hcl", "mode = \"enforce\"\nallow = [\"github.com\"\n")
	_, errOut, code := runPostern(t, "policy", "check", "--policy", bad, "github.com")
	if code != 2 || !strings.Contains(errOut, "bad.hcl:") {
		t.Fatalf("broken policy: code %d\n%s", code, errOut)
	}
	unknown := writeFile(t, "unknown.hcl", "allwo = [\"github.com\"]\n")
	_, errOut, code = runPostern(t, "policy", "check", "--policy", unknown, "github.com")
	if code != 2 || !strings.Contains(errOut, "unknown.hcl:1:1") {
		t.Fatalf("misspelt attribute: code %d\n%s", code, errOut)
	}
	_, errOut, code = runPostern(t, "policy", "check", "--policy", pol, "evil.com:443.github.com")
	if code != 2 || !strings.Contains(errOut, "evil.com:443.github.com") {
		t.Fatalf("junk target: code %d\n%s", code, errOut)
	}
	_, errOut, code = runPostern(t, "policy", "check", "github.com")
	if code != 2 || !strings.Contains(errOut, "--policy") {
		t.Fatalf("no policy: code %d\n%s", code, errOut)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
