//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/postern-dev/postern/door/gateway"
	"github.com/postern-dev/postern/internal/testhosts"
)

// gatewayProc is a running `postern gateway`.
type gatewayProc struct {
	Addr      string // the proxy, host:port
	API       string // the API, host:port
	Token     string // the API token
	Home      string // POSTERN_HOME: the records and the token file
	Dashboard string // the URL it printed, with the token in the fragment

	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	stderr bytes.Buffer
	stdout bytes.Buffer
}

var (
	gatewayListeningRE = regexp.MustCompile(`gateway listening"? addr=(\S+) api=(\S+)`)
	dashboardRE        = regexp.MustCompile(`dashboard at (http://\S+)`)
)

// startGateway runs `postern gateway` with policyText as its default policy,
// its records in home ("" for a new one), until the test ends.
func startGateway(t *testing.T, home, policyText string, args ...string) *gatewayProc {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	if !containsFlag(args, "--resolver") {
		t.Fatal("startGateway: pass --resolver (a test DNS server)")
	}
	pol := filepath.Join(home, "default.hcl")
	if err := os.WriteFile(pol, []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{Home: home, done: make(chan struct{})}
	g.cmd = exec.Command(binFor(t), append([]string{"gateway", "--policy", pol, "--listen", "127.0.0.1:0", "--api", "127.0.0.1:0"}, args...)...)
	g.cmd.Env = append(os.Environ(), "POSTERN_HOME="+home)
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stdout = &gatewayOut{mu: &g.mu, w: &g.stdout}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.stderr.WriteString(line + "\n")
			if m := gatewayListeningRE.FindStringSubmatch(line); m != nil {
				g.Addr, g.API = m[1], m[2]
			}
			if m := dashboardRE.FindStringSubmatch(line); m != nil {
				g.Dashboard = m[1]
			}
			if g.Addr != "" && g.Dashboard != "" && !sent {
				close(ready)
				sent = true
			}
			g.mu.Unlock()
		}
		g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() { g.stop(t) })
	select {
	case <-ready:
	case <-g.done:
		t.Fatalf("postern gateway exited before listening:\n%s", g.Stderr())
	case <-time.After(10 * time.Second):
		t.Fatalf("postern gateway did not say where it listens within 10s:\n%s", g.Stderr())
	}
	tok, err := os.ReadFile(filepath.Join(home, "gateway-api-token"))
	if err != nil {
		t.Fatal(err)
	}
	g.Token = strings.TrimSpace(string(tok))
	return g
}

type gatewayOut struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *gatewayOut) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (g *gatewayProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-g.done:
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		t.Errorf("postern gateway ignored SIGTERM for 10s; killing it")
		g.cmd.Process.Kill()
		<-g.done
	}
	if t.Failed() {
		t.Logf("gateway stderr:\n%s", g.Stderr())
	}
}

func (g *gatewayProc) Stderr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stderr.String()
}

// api makes one API request with the gateway's token and returns the
// status and body.
func (g *gatewayProc) api(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return g.apiAs(t, g.Token, method, path, body)
}

func (g *gatewayProc) apiAs(t *testing.T, token, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+g.API+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// addClient makes a client through the API and returns its token.
func (g *gatewayProc) addClient(t *testing.T, name string) string {
	t.Helper()
	code, body := g.api(t, "POST", "/v1/clients", fmt.Sprintf(`{"name": %q}`, name))
	if code != 201 {
		t.Fatalf("POST /v1/clients %s: %d %s", name, code, body)
	}
	var nc gateway.NewClient
	if err := json.Unmarshal([]byte(body), &nc); err != nil || nc.Name != name || len(nc.Token) < 40 {
		t.Fatalf("new client %q: %+v %v", body, nc, err)
	}
	return nc.Token
}

// events returns the events the query selects.
func (g *gatewayProc) events(t *testing.T, query string) []gateway.Record {
	t.Helper()
	code, body := g.api(t, "GET", "/v1/events?"+query, "")
	if code != 200 {
		t.Fatalf("GET /v1/events?%s: %d %s", query, code, body)
	}
	var out []gateway.Record
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if line == "" {
			continue
		}
		var r gateway.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// waitEvent polls the API until an event of the query matches.
func (g *gatewayProc) waitEvent(t *testing.T, query string, match func(gateway.Record) bool) gateway.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := g.events(t, query)
		for _, e := range evs {
			if match(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching event for ?%s within 5s; have %+v", query, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxyAs is the proxy URL with a client's credentials.
func (g *gatewayProc) proxyAs(name, token string) string {
	return "http://" + name + ":" + token + "@" + g.Addr
}

// gatewayLab is the e2e lab plus a host "files" whose nginx serves a blob
// on port 80, fetched directly and through the gateway to compare.
type gatewayLab struct {
	*e2eLab
	Files    *testhosts.Host
	blobURL  string // http://files.test/blob
	blobSHA  string
	blobSize int64
}

func newGatewayLab(t *testing.T) *gatewayLab {
	t.Helper()
	l := &gatewayLab{e2eLab: newE2ELab(t), blobSize: 1 << 20}
	root := filepath.Join(t.TempDir(), "www")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "blob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(testhosts.BodyReader(l.blobSize, 7)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if l.Files, err = l.Lab.Host(ctx, "files"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Files.ServeNginx(ctx, testhosts.NginxOptions{Root: root, Port: 80}); err != nil {
		t.Fatal(err)
	}
	l.blobURL = "http://files.test/blob"
	// The direct path: curl straight to the files host.
	r := curl(t, "--resolve", "files.test:80:"+l.Files.Addr.String(), l.blobURL)
	if r.Code != 0 || r.HTTP != 200 {
		t.Fatalf("direct fetch of the blob: %+v", r)
	}
	l.blobSHA = sha256Hex([]byte(r.Body))
	if want := testhosts.BodySHA256(l.blobSize, 7); l.blobSHA != want {
		t.Fatalf("nginx served sha256 %s directly, want %s", l.blobSHA, want)
	}
	return l
}

// gatewayPolicy is the default policy of the gateway tests: web.test and
// files.test, on the lab's ports, with their hosts' /24s open by CIDR.
func (l *gatewayLab) gatewayPolicy() string {
	return fmt.Sprintf("ports = [80, 443, 8080]\nallow = [\"web.test\", \"files.test\"]\nallow_cidrs = [%q, %q]\n", l.Web.Prefix.String(), l.Files.Prefix.String())
}

func TestGatewayAttributesEachClientAndJudgesItByItsPolicy(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr))
	alice := g.addClient(t, "alice")
	bob := g.addClient(t, "bob")
	// bob gets a policy of his own: leak.test only.
	code, body := g.api(t, "PUT", "/v1/clients/bob/policy", fmt.Sprintf(`{"ports": [80, 443, 8080], "allow": ["leak.test"], "allow_cidrs": [%q]}`, l.Web.Prefix))
	if code != 200 || !strings.Contains(body, `"own_policy": true`) {
		t.Fatalf("PUT bob's policy: %d %s", code, body)
	}

	// alice, judged by the default: web.test over CONNECT and plain HTTP,
	// the bytes as nginx sends them directly.
	r := curl(t, "--proxy", g.proxyAs("alice", alice), "--cacert", l.CAFile(), "https://web.test/hello")
	if r.Code != 0 || r.HTTP != 200 || r.Connect != 200 {
		t.Fatalf("alice to https://web.test: %+v", r)
	}
	if rep := echo(t, r.Body); rep.SNI != "web.test" || rep.URI != "/hello" {
		t.Fatalf("alice reached %+v", rep)
	}
	r = curl(t, "--proxy", g.proxyAs("alice", alice), l.blobURL)
	if r.Code != 0 || r.HTTP != 200 || sha256Hex([]byte(r.Body)) != l.blobSHA {
		t.Fatalf("alice's blob through the gateway: curl %d http %d sha256 %s, want %s", r.Code, r.HTTP, sha256Hex([]byte(r.Body)), l.blobSHA)
	}
	if r := curl(t, "--proxy", g.proxyAs("alice", alice), "--cacert", l.CAFile(), "https://leak.test/"); r.Connect != 403 {
		t.Fatalf("alice to leak.test: %+v", r)
	}
	// bob, by his own: leak.test yes, web.test no.
	r = curl(t, "--proxy", g.proxyAs("bob", bob), "--cacert", l.CAFile(), "https://leak.test/x")
	if r.Code != 0 || r.HTTP != 200 || echo(t, r.Body).SNI != "leak.test" {
		t.Fatalf("bob to leak.test: %+v", r)
	}
	r = curl(t, "--proxy", g.proxyAs("bob", bob), "http://web.test/")
	if r.HTTP != 403 || !strings.Contains(r.Body, "no allow rule matches") || !strings.Contains(r.Body, "gateway policy of client bob") ||
		!strings.Contains(r.Body, `PATCH /v1/clients/bob/policy {"add_allow":["web.test:80"]}`) {
		t.Fatalf("bob to http://web.test: %+v", r)
	}

	// Every event names its client, and one client's query has no other's.
	ev := g.waitEvent(t, "client=alice", func(e gateway.Record) bool {
		return e.Event.Event == "decision" && e.Host == "web.test" && e.Port == 443 && e.Decision == "allow"
	})
	if ev.Addr != l.Web.Addr.String() || ev.Kind != "connect" || ev.JudgeNS <= 0 {
		t.Fatalf("alice's decision %+v", ev)
	}
	g.waitEvent(t, "client=bob&decision=deny", func(e gateway.Record) bool { return e.Host == "web.test" && e.Port == 80 })
	for _, who := range []string{"alice", "bob"} {
		evs := g.events(t, "client="+who)
		if len(evs) < 3 {
			t.Fatalf("%s has %d events: %+v", who, len(evs), evs)
		}
		for i, e := range evs {
			if e.Client != who {
				t.Fatalf("?client=%s returned %+v", who, e)
			}
			if i > 0 && e.Seq <= evs[i-1].Seq {
				t.Fatalf("events not oldest first: %d after %d", e.Seq, evs[i-1].Seq)
			}
		}
	}
	for _, e := range g.events(t, "client=bob&decision=deny") {
		if e.Decision != "deny" || e.Event.Event != "decision" {
			t.Fatalf("decision=deny returned %+v", e)
		}
	}
	if evs := g.events(t, "client=alice&decision=allow&since=999999"); len(evs) != 0 {
		t.Fatalf("since a seq not yet reached: %+v", evs)
	}
	if evs := g.events(t, "client=alice&since="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(evs) != 0 {
		t.Fatalf("since a time to come: %+v", evs)
	}
}

func TestGatewayRefusesMissingAndWrongCredentialsWith407(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr))
	alice := g.addClient(t, "alice")

	for _, c := range []struct {
		what, proxy string
	}{
		{"no credentials", "http://" + g.Addr},
		{"wrong token", g.proxyAs("alice", "not-the-token")},
		{"unknown client", g.proxyAs("mallory", alice)},
	} {
		r := curl(t, "--proxy", c.proxy, "--cacert", l.CAFile(), "https://web.test/")
		if r.Connect != 407 || r.Code == 0 {
			t.Errorf("%s over CONNECT: %+v", c.what, r)
		}
		r = curl(t, "--proxy", c.proxy, "-i", "http://web.test/")
		if r.HTTP != 407 || !strings.Contains(r.Body, "Proxy-Authenticate: Basic realm=\"postern\"") {
			t.Errorf("%s over plain HTTP: %+v", c.what, r)
		}
	}
	// The attempts are recorded as denials, with the name that was claimed.
	ev := g.waitEvent(t, "client=alice&decision=deny", func(e gateway.Record) bool { return strings.Contains(e.Reason, "wrong token") })
	if ev.Host != "web.test" || ev.Event.Event != "decision" {
		t.Fatalf("wrong-token attempt recorded as %+v", ev)
	}
	g.waitEvent(t, "client=mallory", func(e gateway.Record) bool { return strings.Contains(e.Reason, `no client "mallory"`) })
	g.waitEvent(t, "decision=deny", func(e gateway.Record) bool {
		return e.Client == "" && strings.Contains(e.Reason, "no Proxy-Authorization header")
	})
	// Nothing was reached on any of them.
	if evs := g.events(t, "decision=allow"); len(evs) != 0 {
		t.Fatalf("allowed without credentials: %+v", evs)
	}
	m := g.metrics(t)
	for problem, want := range map[string]float64{"missing": 2, "wrong token": 2, "unknown client": 2} {
		if got := metricValue(m, "postern_gateway_auth_failures_total", map[string]string{"problem": problem}); got != want {
			t.Errorf("auth failures %q = %v, want %v", problem, got, want)
		}
	}
}

func TestGatewayPatchCountsFromTheNextConnectionAndSurvivesRestart(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	home := t.TempDir()
	args := []string{l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr)}
	g := startGateway(t, home, l.gatewayPolicy(), args...)
	alice := g.addClient(t, "alice")
	https := func(proxy, url string) curlResult {
		return curl(t, "--proxy", proxy, "--cacert", l.CAFile(), url)
	}
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Connect != 403 {
		t.Fatalf("leak.test before the patch: %+v", r)
	}
	code, body := g.api(t, "PATCH", "/v1/clients/alice/policy", `{"add_allow": ["leak.test"], "add_deny": ["api.web.test"]}`)
	if code != 200 || !strings.Contains(body, `"leak.test"`) {
		t.Fatalf("PATCH: %d %s", code, body)
	}
	// Applied as sets: the same patch again changes nothing.
	code, again := g.api(t, "PATCH", "/v1/clients/alice/policy", `{"add_allow": ["leak.test"], "add_deny": ["api.web.test"]}`)
	if code != 200 || strings.Count(again, `"leak.test"`) != 1 {
		t.Fatalf("PATCH again: %d %s", code, again)
	}
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Code != 0 || r.HTTP != 200 {
		t.Fatalf("leak.test after the patch: %+v", r)
	}
	// The patch started from the default: web.test still allowed.
	if r := https(g.proxyAs("alice", alice), "https://web.test/"); r.HTTP != 200 {
		t.Fatalf("web.test after the patch: %+v", r)
	}
	// Taking the rule out counts from the next connection too.
	code, _ = g.api(t, "PATCH", "/v1/clients/alice/policy", `{"remove_allow": ["leak.test"]}`)
	if code != 200 {
		t.Fatalf("PATCH remove: %d", code)
	}
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Connect != 403 {
		t.Fatalf("leak.test after removing it: %+v", r)
	}
	g.api(t, "PATCH", "/v1/clients/alice/policy", `{"add_allow": ["leak.test"]}`)

	// Token rotation: the old token stops, the new one works.
	code, body = g.api(t, "POST", "/v1/clients/alice/token", "")
	var nc gateway.NewClient
	if code != 200 || json.Unmarshal([]byte(body), &nc) != nil || nc.Token == alice {
		t.Fatalf("rotate: %d %s", code, body)
	}
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Connect != 407 {
		t.Fatalf("old token after rotation: %+v", r)
	}
	alice = nc.Token

	// The command line, beside the running gateway, on the same records.
	stdout, stderr, rc := runPosternHome(t, home, "gateway", "clients", "add", "carol")
	carol := strings.TrimSpace(stdout)
	if rc != 0 || len(carol) < 40 || !strings.Contains(stderr, "HTTPS_PROXY=http://carol:TOKEN@") {
		t.Fatalf("clients add carol: %d %q %q", rc, stdout, stderr)
	}
	waitFor(t, "carol's credentials work", func() bool {
		return https(g.proxyAs("carol", carol), "https://web.test/").HTTP == 200
	})
	stdout, _, rc = runPosternHome(t, home, "gateway", "clients", "list")
	if rc != 0 || !regexp.MustCompile(`(?m)^alice\s+own\s+enforce\s+web\.test,files\.test,leak\.test\s`).MatchString(stdout) || !regexp.MustCompile(`(?m)^carol\s+default`).MatchString(stdout) {
		t.Fatalf("clients list:\n%s", stdout)
	}
	if _, _, rc := runPosternHome(t, home, "gateway", "clients", "rm", "carol"); rc != 0 {
		t.Fatalf("clients rm carol: %d", rc)
	}
	waitFor(t, "carol's credentials refused", func() bool {
		return https(g.proxyAs("carol", carol), "https://web.test/").Connect == 407
	})

	// A restart keeps the clients, their tokens and their policies.
	g.stop(t)
	g = startGateway(t, home, l.gatewayPolicy(), args...)
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Code != 0 || r.HTTP != 200 {
		t.Fatalf("leak.test after the restart: %+v", r)
	}
	if r := https(g.proxyAs("alice", alice), "https://api.web.test/"); r.Connect != 403 {
		t.Fatalf("api.web.test (denied by the patch) after the restart: %+v", r)
	}
	code, body = g.api(t, "GET", "/v1/clients/alice/policy", "")
	if code != 200 || !strings.Contains(body, `"api.web.test"`) || !strings.Contains(body, `"own_policy": true`) {
		t.Fatalf("alice's policy after the restart: %d %s", code, body)
	}
	// Back to the default.
	if code, _ := g.api(t, "DELETE", "/v1/clients/alice/policy", ""); code != 200 {
		t.Fatalf("DELETE policy: %d", code)
	}
	if r := https(g.proxyAs("alice", alice), "https://leak.test/"); r.Connect != 403 {
		t.Fatalf("leak.test back on the default: %+v", r)
	}
}

// runPosternHome runs the built binary with POSTERN_HOME=home.
func runPosternHome(t *testing.T, home string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, binFor(t), args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = append(os.Environ(), "POSTERN_HOME="+home)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run postern %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestGatewayHardFloorHoldsForEveryClient(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("meta.test", netipMust("169.254.169.254")))
	alice := g.addClient(t, "alice")
	bob := g.addClient(t, "bob")
	// Nothing in the API opens the floor.
	for _, patch := range []string{`{"add_cidrs": ["127.0.0.0/8"]}`, `{"add_cidrs": ["169.254.169.254/32"]}`, `{"add_allow": ["127.0.0.1"]}`} {
		code, body := g.api(t, "PATCH", "/v1/clients/alice/policy", patch)
		if code != 400 || !strings.Contains(body, "hard floor") && !strings.Contains(body, "allow_cidrs") {
			t.Fatalf("PATCH %s: %d %s", patch, code, body)
		}
	}
	// A policy as wide as it gets still stops at the floor.
	wide := `{"mode": "observe", "ports": [80, 443, 8080, 9090], "allow": ["meta.test", "web.test"], "allow_cidrs": ["0.0.0.0/0", "::/0"]}`
	for _, who := range []string{"alice", "bob"} {
		if code, body := g.api(t, "PUT", "/v1/clients/"+who+"/policy", wide); code != 200 {
			t.Fatalf("PUT wide policy for %s: %d %s", who, code, body)
		}
	}
	_, apiPort, _ := strings.Cut(g.API, ":")
	for _, c := range []struct{ who, token string }{{"alice", alice}, {"bob", bob}} {
		for _, target := range []string{"127.0.0.1:" + apiPort, "169.254.169.254:80", "meta.test:80", "[::1]:443", "0x7f000001:443"} {
			raw := rawRequest(t, g.Addr, "CONNECT "+target+" HTTP/1.1", "Host: "+target,
				"Proxy-Authorization: Basic "+basicAuth(c.who, c.token))
			if raw.Status != 403 || !strings.Contains(raw.Body, "hard floor") {
				t.Errorf("%s CONNECT %s: %d %q", c.who, target, raw.Status, raw.Body)
			}
		}
		// The gateway's own API, by the address it listens on.
		r := curl(t, "--proxy", g.proxyAs(c.who, c.token), "http://"+g.API+"/v1/clients")
		if r.HTTP != 403 || !strings.Contains(r.Body, "hard floor") {
			t.Errorf("%s to the gateway's API through its proxy: %+v", c.who, r)
		}
	}
}

func basicAuth(name, token string) string {
	return base64Std(name + ":" + token)
}

func TestGatewayAPIRefusesWithoutTokenAndExplainsBadRequests(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver())
	g.addClient(t, "alice")
	for _, tok := range []string{"", "wrong-token-wrong-token"} {
		for _, route := range []string{"GET /v1/clients", "GET /metrics", "GET /v1/events", "POST /v1/clients", "PATCH /v1/clients/alice/policy", "GET /v1/nothing"} {
			method, path, _ := strings.Cut(route, " ")
			code, body := g.apiAs(t, tok, method, path, `{"name": "eve"}`)
			if code != 401 || !strings.Contains(body, "Authorization: Bearer") {
				t.Errorf("%s with token %q: %d %s", route, tok, code, body)
			}
		}
	}
	if code, _ := g.apiAs(t, "", "GET", "/", ""); code != 200 {
		t.Errorf("the dashboard needs no token, got %d", code)
	}
	cases := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"PATCH", "/v1/clients/alice/policy", `{"add_allow": ["github.com"`, 400, "not one JSON object"},
		{"PATCH", "/v1/clients/alice/policy", `{"add_alow": ["github.com"]}`, 400, `unknown field \"add_alow\"`},
		{"PATCH", "/v1/clients/alice/policy", `{"add_allow": "github.com"}`, 400, `field \"add_allow\": write a list of strings`},
		{"PATCH", "/v1/clients/alice/policy", `{"ports": [80, 70000]}`, 400, "70000 is not a port"},
		{"PATCH", "/v1/clients/alice/policy", `{"add_allow": ["https://github.com/x"]}`, 400, `a rule names a host, not a URL; write \"github.com\"`},
		{"PATCH", "/v1/clients/alice/policy", `{"add_allow": ["a.test:8443"]}`, 400, "is not in ports"},
		{"PATCH", "/v1/clients/alice/policy", `{"mode": "enforcing"}`, 400, "unknown mode"},
		{"PUT", "/v1/clients/alice/policy", `{"allow": ["*"]}`, 400, `mode = \"observe\"`},
		{"PATCH", "/v1/clients/nobody/policy", `{"add_allow": ["x.test"]}`, 404, `client \"nobody\"`},
		{"POST", "/v1/clients", `{"name": "alice"}`, 409, "already exists"},
		{"POST", "/v1/clients", `{"name": "a b"}`, 400, "a client name is"},
		{"POST", "/v1/clients", `{"nom": "x"}`, 400, `send {\"name\": \"alice\"}`},
		{"GET", "/v1/events?decision=maybe", "", 400, "decision=deny"},
		{"GET", "/v1/events?since=yesterday", "", 400, "RFC 3339"},
		{"DELETE", "/v1/clients/nobody", "", 404, "not found"},
	}
	for _, c := range cases {
		code, body := g.api(t, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %s, want %d with %q", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
	// A refused patch changed nothing.
	code, body := g.api(t, "GET", "/v1/clients/alice/policy", "")
	if code != 200 || !strings.Contains(body, `"own_policy": false`) {
		t.Fatalf("alice's policy after refused patches: %d %s", code, body)
	}
}

func TestGatewayFollowStreamsAndMetricsCount(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), Pin("files.test", l.Files.Addr), Pin("web.test", l.Web.Addr), Pin("leak.test", l.Web.Addr))
	alice := g.addClient(t, "alice")
	bob := g.addClient(t, "bob")

	// A follower of alice's denials, started before they happen.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.API+"/v1/events?client=alice&decision=deny&follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+g.Token)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("follow: %d %v", resp.StatusCode, resp.Header)
	}
	lines := make(chan gateway.Record, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var r gateway.Record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				lines <- r
			}
		}
		close(lines)
	}()
	curl(t, "--proxy", g.proxyAs("bob", bob), "http://leak.test/") // bob's denial: not alice's follower's
	curl(t, "--proxy", g.proxyAs("alice", alice), "http://web.test/")
	r := curl(t, "--proxy", g.proxyAs("alice", alice), "http://leak.test/")
	if r.HTTP != 403 {
		t.Fatalf("alice to leak.test: %+v", r)
	}
	select {
	case rec := <-lines:
		if rec.Client != "alice" || rec.Host != "leak.test" || rec.Decision != "deny" {
			t.Fatalf("follower got %+v first, want alice's denial of leak.test", rec)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower got nothing within 5s")
	}

	// Metrics, read by Prometheus' own parser.
	r = curl(t, "--proxy", g.proxyAs("alice", alice), "--cacert", l.CAFile(), "https://web.test/")
	if r.HTTP != 200 {
		t.Fatal(r)
	}
	waitFor(t, "alice's tunnel counted as closed", func() bool {
		m := g.metrics(t)
		return metricValue(m, "postern_gateway_bytes_total", map[string]string{"client": "alice", "direction": "down"}) > float64(len(r.Body))
	})
	m := g.metrics(t)
	if v := metricValue(m, "postern_gateway_decisions_total", map[string]string{"client": "alice", "decision": "allow"}); v != 2 {
		t.Errorf("alice's allows = %v, want 2", v)
	}
	if v := metricValue(m, "postern_gateway_decisions_total", map[string]string{"client": "alice", "decision": "deny"}); v != 1 {
		t.Errorf("alice's denials = %v, want 1", v)
	}
	if v := metricValue(m, "postern_gateway_decisions_total", map[string]string{"client": "bob", "decision": "deny"}); v != 1 {
		t.Errorf("bob's denials = %v, want 1", v)
	}
	if v := metricValue(m, "postern_gateway_clients", nil); v != 2 {
		t.Errorf("clients = %v", v)
	}
	h := m["postern_gateway_judgement_seconds"]
	if h == nil || h.GetType().String() != "HISTOGRAM" || h.Metric[0].GetHistogram().GetSampleCount() != 4 {
		t.Errorf("judgement histogram %v", h)
	}

	// An open tunnel is counted while it is open.
	c := dialCONNECT(t, g.Addr, "web.test:443", basicAuth("alice", alice))
	waitFor(t, "an open tunnel", func() bool {
		return metricValue(g.metrics(t), "postern_gateway_open_tunnels", map[string]string{"client": "alice"}) == 1
	})
	c.Close()
	waitFor(t, "the tunnel closed", func() bool {
		return metricValue(g.metrics(t), "postern_gateway_open_tunnels", map[string]string{"client": "alice"}) == 0
	})
}

// metrics reads /metrics with the Prometheus text parser.
func (g *gatewayProc) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := g.api(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, body)
	}
	return fams
}

// metricValue is one series' value; a series not there is 0.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	return 0
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// dialCONNECT opens a tunnel through the proxy at addr with the given Basic
// credentials and returns it once the proxy said 200.
func dialCONNECT(t *testing.T, addr, target, creds string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, creds)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	c.SetReadDeadline(time.Time{})
	return c
}

func TestGatewayWarnsLoudlyWhenItsAPIIsNotOnLoopback(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newGatewayLab(t)
	g := startGateway(t, "", l.gatewayPolicy(), l.Resolver(), "--api", "0.0.0.0:0")
	if !strings.Contains(g.Stderr(), "THE GATEWAY'S API IS NOT ON LOOPBACK") {
		t.Fatalf("no warning for an API on every address:\n%s", g.Stderr())
	}
	if !strings.HasPrefix(g.Dashboard, "http://127.0.0.1:") {
		t.Fatalf("dashboard printed as %s", g.Dashboard)
	}
	if code, _ := g.apiAs(t, "", "GET", "/v1/clients", ""); code != 401 {
		t.Fatalf("without a token: %d", code)
	}
	// Its own addresses are on every client's floor, the link's included.
	alice := g.addClient(t, "alice")
	g.api(t, "PUT", "/v1/clients/alice/policy", `{"ports": [80, 443, 9090], "allow_cidrs": ["0.0.0.0/0"]}`)
	_, apiPort, _ := net.SplitHostPort(g.API)
	r := curl(t, "--proxy", g.proxyAs("alice", alice), "http://"+l.Web.Gateway.String()+":"+apiPort+"/v1/clients")
	if r.HTTP != 403 || !strings.Contains(r.Body, "the door's own address") {
		t.Fatalf("alice to the gateway's API by its address on the lab's link: %+v", r)
	}
}
