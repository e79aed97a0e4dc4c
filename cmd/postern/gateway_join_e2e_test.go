//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door/gateway"
	"github.com/postern-dev/postern/internal/testhosts"
)

// A walled run whose door is the gateway: the wall as for any run, every
// connection sent on to the gateway with alice's credentials, and judged
// there by alice's policy.
func TestGatewayJoinedRunIsJudgedByTheClientsPolicyThere(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr))
	alice := g.addClient(t, "alice")
	p := poster{Home: measuredHome(t), Dir: workDir(t, map[string]string{"ca.pem": l.CAFile()})}
	_, apiPort, _ := strings.Cut(g.API, ":")
	_, proxyPort, _ := strings.Cut(g.Addr, ":")
	joinURL := g.proxyAs("alice", alice)

	w := p.run(t, []string{"--gateway", joinURL},
		curlStep("tls", "--cacert", "ca.pem", "https://web.test/joined-tls")+
			curlStep("plain", "http://web.test/joined-plain")+
			step("blob", "curl -sS --max-time 8 http://files.test/blob | sha256sum")+
			curlStep("denied", "http://leak.test/")+
			curlStep("denied-tls", "--cacert", "ca.pem", "https://leak.test/")+
			curlStep("floor", "http://127.0.0.1/")+
			curlStep("gateway-direct", "--noproxy", "*", "http://127.0.0.1:"+proxyPort+"/")+
			curlStep("api-direct", "http://127.0.0.1:"+apiPort+"/v1/clients")+
			curlStep("other-port", "http://"+l.Web.Addr.String()+":8081/")+
			step("ps", "ps -eo args; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '; env"))
	if w.Code != 0 {
		t.Fatalf("run: %s", w)
	}
	if out := w.Out(t, "tls"); httpCode(out) != 200 || !strings.Contains(out, `"sni":"web.test"`) {
		t.Fatalf("https to web.test through the gateway: %s", w)
	}
	if out := w.Out(t, "plain"); httpCode(out) != 200 || !strings.Contains(out, `"uri":"/joined-plain"`) {
		t.Fatalf("http to web.test through the gateway: %s", w)
	}
	if out := w.Out(t, "blob"); !strings.HasPrefix(strings.TrimSpace(out), l.blobSHA) {
		t.Fatalf("the blob through the joined run: %q, want sha256 %s", out, l.blobSHA)
	}
	// Denied by alice's policy at the gateway, in the gateway's words.
	if out := w.Out(t, "denied"); httpCode(out) != 403 || !strings.Contains(out, "no allow rule matches") || !strings.Contains(out, "leak.test") {
		t.Fatalf("http to leak.test: %s", w)
	}
	if out := w.Out(t, "denied-tls"); rc(t, out) == 0 {
		t.Fatalf("https to leak.test: %s", w)
	}
	if !strings.Contains(w.Stderr, "leak.test") || !strings.Contains(w.Stderr, "refused by http://127.0.0.1:"+proxyPort) {
		t.Fatalf("the run's stderr does not tell the gateway's refusal:\n%s", w.Stderr)
	}
	// Nothing reaches anything but through the gateway: the floor is still
	// the door's own, and the gateway's ports are not the run's to reach.
	for _, name := range []string{"floor", "gateway-direct", "api-direct", "other-port"} {
		if out := w.Out(t, name); httpCode(out) == 200 || rc(t, out) == 0 {
			t.Errorf("%s reached something: %s", name, out)
		}
	}
	// The gateway judged it all, for alice.
	for _, host := range []string{"web.test", "leak.test"} {
		g.waitEvent(t, "client=alice", func(e gateway.Record) bool { return e.Host == host && e.Kind == "connect" })
	}
	if evs := g.events(t, "client=alice&decision=deny"); len(evs) == 0 {
		t.Fatal("the gateway recorded no denial for alice")
	}
	// The token is in no record, no event, and not in what the walled
	// command can see.
	if strings.Contains(w.Out(t, "ps"), alice) {
		t.Fatalf("the walled command can see the token:\n%s", w.Out(t, "ps"))
	}
	rec, _ := json.Marshal(w.Run)
	evs, _ := json.Marshal(w.Events)
	for what, s := range map[string]string{"run record": string(rec), "run events": string(evs)} {
		if strings.Contains(s, alice) {
			t.Fatalf("the %s holds the token: %s", what, s)
		}
	}
	if w.Run.Policy != "gateway http://"+g.Addr {
		t.Fatalf("run record names policy %q, want the gateway without credentials", w.Run.Policy)
	}
	ev, ok := w.Events.decision("transparent", "web.test", 443)
	if !ok || ev.Decision != "allow" || !strings.Contains(ev.Reason, "sent on to http://"+g.Addr) {
		t.Fatalf("the run's own event for web.test: %+v %v", ev, ok)
	}
	ev, ok = w.Events.decision("transparent", "leak.test", 80)
	if !ok || ev.Decision != "deny" || !strings.Contains(ev.Reason, "no allow rule matches") {
		t.Fatalf("the run's own event for leak.test: %+v %v", ev, ok)
	}
}

// The same option lets a door use an upstream proxy: here the gateway.
func TestDoorSendsEveryConnectionOnToAnUpstreamProxy(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr))
	alice := g.addClient(t, "alice")
	d := startDoor(t, "", "", l.Resolver(), "--upstream-proxy", g.proxyAs("alice", alice))

	r := curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://web.test/up")
	if r.Code != 0 || r.HTTP != 200 || echo(t, r.Body).SNI != "web.test" {
		t.Fatalf("CONNECT through the door and the gateway: %+v", r)
	}
	r = curl(t, "--proxy", proxyURL(d), l.blobURL)
	if r.Code != 0 || r.HTTP != 200 || sha256Hex([]byte(r.Body)) != l.blobSHA {
		t.Fatalf("plain HTTP through the door and the gateway: curl %d http %d sha256 %s, want %s", r.Code, r.HTTP, sha256Hex([]byte(r.Body)), l.blobSHA)
	}
	r = curl(t, "--proxy", proxyURL(d), "--cacert", l.CAFile(), "https://leak.test/")
	if r.Connect != 403 {
		t.Fatalf("denied CONNECT: %+v", r)
	}
	raw := rawRequest(t, d.Addr, "CONNECT leak.test:443 HTTP/1.1", "Host: leak.test:443")
	if raw.Status != 403 || !strings.Contains(raw.Body, "no allow rule matches") || raw.Header.Get("X-Postern-Decision") == "" {
		t.Fatalf("the gateway's refusal through the door: %+v", raw)
	}
	r = curl(t, "--proxy", proxyURL(d), "http://leak.test/")
	if r.HTTP != 403 || !strings.Contains(r.Body, "no allow rule matches") {
		t.Fatalf("denied GET: %+v", r)
	}
	// The floor is still the door's own.
	raw = rawRequest(t, d.Addr, "CONNECT 127.0.0.1:"+strconv.Itoa(int(portOf(t, g.Addr)))+" HTTP/1.1", "Host: x")
	if raw.Status != 403 || !strings.Contains(raw.Body, "hard floor") {
		t.Fatalf("CONNECT to loopback through a door with an upstream: %+v", raw)
	}
	ev := d.decision(t, "leak.test", 443)
	if ev.Decision != "deny" || !strings.Contains(ev.Reason, "refused by http://"+g.Addr) {
		t.Fatalf("the door's event for the refusal: %+v", ev)
	}
	for _, e := range d.Events() {
		if b, _ := json.Marshal(e); strings.Contains(string(b), alice) {
			t.Fatalf("an event holds the token: %s", b)
		}
	}
	g.waitEvent(t, "client=alice&decision=allow", func(e gateway.Record) bool { return e.Host == "web.test" })
	if strings.Contains(d.Stderr(), alice) {
		t.Fatal("the door logged the token")
	}
}

func portOf(t *testing.T, hostport string) uint16 {
	t.Helper()
	_, p, _ := strings.Cut(hostport, ":")
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(fmt.Errorf("port of %q: %w", hostport, err))
	}
	return uint16(n)
}
