//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// The guardrail seal end to end: a guardrail (an LLM gateway) on the run's
// machine's loopback, a model host the policy seals behind it, and the walled
// run reaching the model only through the guardrail.

// guardrailServer answers on 127.0.0.1 of the test's namespace, counting the
// requests that reach it.
type guardrailServer struct {
	Addr netip.AddrPort
	hits atomic.Int32
}

func startGuardrail(t *testing.T) *guardrailServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &guardrailServer{Addr: netip.MustParseAddrPort(ln.Addr().String())}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.hits.Add(1)
		fmt.Fprintf(w, "guardrail saw %s %s\n", r.Method, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

// sealPolicy allows the lab's web names, and seals api.web.test behind a
// guardrail at addr.
func sealPolicy(t *testing.T, l *wallLab, addr netip.AddrPort) string {
	t.Helper()
	return writeFile(t, "seal-policy.hcl", fmt.Sprintf(`mode = "enforce"
ports = [80, 443]
allow = ["web.test"]
allow_cidrs = [%q]
guardrail "model" {
  address = %q
  hosts   = ["api.web.test"]
  env     = ["ANTHROPIC_BASE_URL"]
}
`, l.Web.Prefix, addr))
}

func TestSealHeldOnTheLocalWall(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newWallLab(t)
	g := startGuardrail(t)
	pol := sealPolicy(t, l, g.Addr)
	p := l.poster(t)
	script := step("env", `echo "$ANTHROPIC_BASE_URL $POSTERN_GUARDRAIL_MODEL_URL"`) +
		curlStep("through-var", `$ANTHROPIC_BASE_URL/v1/messages`) +
		curlStep("through-postern-var", `$POSTERN_GUARDRAIL_MODEL_URL/v1/models`) +
		curlStep("sealed-http", "http://api.web.test/v1/messages") +
		curlStep("sealed-https", "--cacert", "ca.pem", "https://api.web.test/v1/messages") +
		curlStep("other-allowed", "http://web.test/fine") +
		curlStep("loopback-direct", fmt.Sprintf("http://127.0.0.1:%d/", g.Addr.Port())) +
		curlStep("guardrail-other-port", fmt.Sprintf("http://198.19.255.1:%d/", g.Addr.Port()+1))
	// The variables are curl arguments expanded by the shell inside the run.
	script = strings.ReplaceAll(script, `'$ANTHROPIC_BASE_URL/v1/messages'`, `"$ANTHROPIC_BASE_URL/v1/messages"`)
	script = strings.ReplaceAll(script, `'$POSTERN_GUARDRAIL_MODEL_URL/v1/models'`, `"$POSTERN_GUARDRAIL_MODEL_URL/v1/models"`)
	w := p.run(t, []string{"--policy", pol, "--resolver", l.Upstream.Addr.String()}, script)
	if w.Code != 0 {
		t.Fatalf("run: %s", w)
	}
	want := fmt.Sprintf("http://198.19.255.1:%d", g.Addr.Port())
	if got := strings.TrimSpace(strings.Split(strings.TrimSpace(w.Out(t, "env")), "\n")[0]); got != want+" "+want {
		t.Fatalf("the variables inside the run: %q, want both %s", got, want)
	}
	for _, s := range []string{"through-var", "through-postern-var"} {
		if out := w.Out(t, s); httpCode(out) != 200 || !strings.Contains(out, "guardrail saw GET") {
			t.Errorf("%s: %s", s, out)
		}
	}
	if g.hits.Load() != 2 {
		t.Errorf("the guardrail saw %d requests, want 2", g.hits.Load())
	}
	if out := w.Out(t, "sealed-http"); httpCode(out) == 200 {
		t.Errorf("the sealed host over plain HTTP: %s", out)
	}
	if out := w.Out(t, "sealed-https"); httpCode(out) == 200 {
		t.Errorf("the sealed host over HTTPS: %s", out)
	}
	if hits := l.Hits.with("/v1/messages"); len(hits) != 0 {
		t.Errorf("the model host was reached directly: %+v", hits)
	}
	if out := w.Out(t, "other-allowed"); httpCode(out) != 200 {
		t.Errorf("another allowed host: %s", out)
	}
	for _, s := range []string{"loopback-direct", "guardrail-other-port"} {
		if out := w.Out(t, s); httpCode(out) == 200 {
			t.Errorf("%s reached something: %s", s, out)
		}
	}
	if ev, ok := w.Events.find(func(e door.Event) bool {
		return e.Host == "api.web.test" && e.Decision == "deny" && strings.Contains(e.Reason, "api.web.test is sealed: reach it through guardrail model at $ANTHROPIC_BASE_URL")
	}); !ok {
		t.Errorf("no denial names the guardrail\n%s", w)
	} else if !strings.Contains(w.Stderr, ev.Reason) {
		t.Errorf("the denial was not printed: %s", w.Stderr)
	}
	if w.Run.Seal == nil || !w.Run.Seal.Held || w.Run.Seal.Guardrail != "model" {
		t.Fatalf("the run's seal: %+v", w.Run.Seal)
	}
	show := p.exec(t, "runs", "show", w.Run.ID)
	if !strings.Contains(show.Stdout, "guardrail model, held") {
		t.Errorf("runs show:\n%s", show.Stdout)
	}
	var js struct {
		Seal *records.Seal `json:"seal"`
	}
	if err := json.Unmarshal([]byte(p.exec(t, "runs", "show", w.Run.ID, "--json").Stdout), &js); err != nil || js.Seal == nil || !js.Seal.Held {
		t.Errorf("runs show --json seal: %+v %v", js.Seal, err)
	}
	check := p.exec(t, "policy", "check", "--policy", pol, "api.web.test")
	if check.Code != 1 || !strings.Contains(check.Stdout, "deny (sealed)") || !strings.Contains(check.Stdout, `guardrail "model"`) {
		t.Errorf("policy check of the sealed host: %d\n%s", check.Code, check.Stdout)
	}
}

func TestSealNotHeldWhenTheGuardrailIsDown(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newWallLab(t)
	// An address where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	p := l.poster(t)
	w := p.run(t, []string{"--policy", sealPolicy(t, l, down), "--resolver", l.Upstream.Addr.String()},
		curlStep("sealed", "http://api.web.test/v1/messages")+curlStep("guardrail", `"$ANTHROPIC_BASE_URL/"`))
	if w.Run.Seal == nil || w.Run.Seal.Held || !strings.Contains(w.Run.Seal.Why, "guardrail model did not answer at "+down.String()) {
		t.Fatalf("seal with the guardrail down: %+v", w.Run.Seal)
	}
	if !strings.Contains(w.Stderr, "WARNING: run "+w.Run.ID+": the guardrail seal (model) is not held") {
		t.Errorf("no warning at start: %s", w.Stderr)
	}
	if httpCode(w.Out(t, "sealed")) == 200 || len(l.Hits.with("/v1/messages")) != 0 {
		t.Errorf("the sealed host opened while the guardrail was down: %s", w.Out(t, "sealed"))
	}
}

func TestSealNotHeldInAContainer(t *testing.T) {
	testhosts.EndToEnd(t)
	ctrSetup(t)
	l := newWallLab(t)
	g := startGuardrail(t)
	home := ctrHomeCopy(t)
	r := ctrPostern(t, home, "run", "--policy", sealPolicy(t, l, g.Addr), "--resolver", l.Upstream.Addr.String(),
		"--container", ctrImage, "--", "sh", "-c", `wget -q -O - "$ANTHROPIC_BASE_URL/v1/c"; echo "rc=$?"`)
	if !strings.Contains(r.Stdout, "guardrail saw GET /v1/c") {
		t.Errorf("the container run was not pointed at its guardrail: %s\n%s", r.Stdout, r.Stderr)
	}
	run := ctrRecord(t, home)
	if run.Seal == nil || run.Seal.Held || !strings.Contains(run.Seal.Why, "container runs are not sealed") {
		t.Fatalf("the container run's seal: %+v", run.Seal)
	}
}

func TestSealHeldOnARemoteMachine(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	// The guardrail runs on the remote, beside the run, on its loopback.
	gsrv, err := r.Remote.Host.ServeHTTPAt(netip.MustParseAddr("127.0.0.1"), 0, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "remote guardrail saw %s\n", req.URL.Path)
	}))
	if err != nil {
		t.Fatal(err)
	}
	pol := writeFile(t, "remote-seal.hcl", fmt.Sprintf(`mode = "enforce"
ports = [80]
allow = ["upstream.test"]
allow_cidrs = [%q]
guardrail "model" {
  address = %q
  hosts   = ["upstream.test"]
  env     = ["OPENAI_BASE_URL"]
}
`, r.Link.Prefix, gsrv.Addr))
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--", "sh", "-c",
		`curl -sS --max-time 5 "$OPENAI_BASE_URL/v1/r"; curl -sS --max-time 5 -o /dev/null -w 'sealed=%{http_code}\n' http://upstream.test/; exit 3`)
	if code != 3 {
		t.Fatalf("remote run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "remote guardrail saw /v1/r") || strings.Contains(stdout, "sealed=200") {
		t.Fatalf("remote run's output: %s\n%s", stdout, stderr)
	}
	run := lastRun(t, r.C)
	if run.Seal == nil || !run.Seal.Held {
		t.Fatalf("the remote run's seal: %+v", run.Seal)
	}
}

func TestNetworkNone(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newWallLab(t)
	p := l.poster(t)
	mark := "none-" + randHex(4)
	script := curlStep("tcp-addr", fmt.Sprintf("http://%s/%s", l.Web.Addr, mark)) +
		curlStep("tcp-name", "http://web.test/"+mark) +
		step("dns", "dig +time=1 +tries=1 @"+l.Upstream.Addr.Addr().String()+" web.test") +
		step("dns-stub", "dig +time=1 +tries=1 @127.0.0.53 web.test") +
		step("udp", fmt.Sprintf("echo %s | socat -T1 - UDP:%s:9999", mark, l.Web.Addr)) +
		step("routes", "ip route; ip -6 route") +
		"exit 7\n"
	before := len(l.Upstream.Queries())
	w := p.run(t, []string{"--network", "none"}, script)
	if w.Code != 7 {
		t.Fatalf("exit status: %s", w)
	}
	for _, s := range []string{"tcp-addr", "tcp-name"} {
		if out := w.Out(t, s); httpCode(out) > 0 || rc(t, out) == 0 {
			t.Errorf("%s: %s", s, out)
		}
	}
	for _, s := range []string{"dns", "dns-stub", "udp"} {
		if out := w.Out(t, s); rc(t, out) == 0 && !strings.Contains(out, "unreachable") {
			if s != "udp" {
				t.Errorf("%s succeeded: %s", s, out)
			}
		}
	}
	if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(w.Out(t, "routes")), "rc=0")) != "" {
		t.Errorf("routes inside a run with no network: %q", w.Out(t, "routes"))
	}
	if len(l.Hits.with(mark)) != 0 || len(l.UDP.containing(mark)) != 0 || len(l.Upstream.Queries()) != before {
		t.Errorf("something left the run: hits %v udp %v", l.Hits.with(mark), l.UDP.containing(mark))
	}
	if w.Run.Network != "none" || w.Run.Carry != "network-wall" || len(w.Events) != 0 {
		t.Errorf("record: network %q carry %q, %d events", w.Run.Network, w.Run.Carry, len(w.Events))
	}
	if r := p.exec(t, "run", "--network", "none", "--egress-open", "x", "--", "true"); r.Code != 2 {
		t.Errorf("--network none with --egress-open: exit %d %s", r.Code, r.Stderr)
	}

}
