//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// Inspection end to end: the built binary, real clients inside the wall
// (curl, git, Python requests, Node's fetch), real servers in test hosts
// (nginx over TLS with git's smart HTTP; Go's net/http server where a test
// must see the headers that arrived).

// inspectLab is the lab of the inspection tests:
//   - api: HTTPS (Go's server) for api.web.test and web.test, recording the
//     headers that arrive; /echo answers with the Authorization it got;
//     badcert.web.test resolves here too, and its certificate does not name it;
//   - files: nginx over TLS for files.web.test and spliced.web.test, serving
//     bodies and the git fixture (smart HTTP);
//   - ns: the door's resolver.
type inspectLab struct {
	*testhosts.Lab
	API, Files, NS *testhosts.Host
	DNS            *testhosts.RecordingDNS
	Git            *testhosts.GitRepo
	Seen           *headerLog

	Token, Key string // the injected values
	KeyFile    string // where the door reads Key from
	Near       string // a body of near misses of Key, and Key itself once
}

// headerLog records what reached the api host.
type headerLog struct {
	mu   sync.Mutex
	reqs []seenReq
}

type seenReq struct{ Method, URI, Auth, Proto string }

func (l *headerLog) all() []seenReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenReq(nil), l.reqs...)
}

func (l *headerLog) with(s string) []seenReq {
	var out []seenReq
	for _, r := range l.all() {
		if strings.Contains(r.URI, s) {
			out = append(out, r)
		}
	}
	return out
}

const (
	inspectBodySize = 3 << 20
	inspectBodySeed = 77
)

func newInspectLab(t *testing.T) *inspectLab {
	t.Helper()
	testhosts.RequireTool(t, "nginx", "nginx")
	testhosts.RequireTool(t, "git", "git")
	lab := testhosts.NewTestLab(t, "insp")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := &inspectLab{Lab: lab, Seen: &headerLog{},
		Token: "Bearer e2e-" + randHex(12), Key: "key-" + randHex(12)}
	for _, hp := range []struct {
		h    **testhosts.Host
		name string
	}{{&l.API, "api"}, {&l.Files, "files"}, {&l.NS, "ns"}} {
		h, err := lab.Host(ctx, hp.name)
		if err != nil {
			t.Fatal(err)
		}
		*hp.h = h
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.Seen.mu.Lock()
		l.Seen.reqs = append(l.Seen.reqs, seenReq{r.Method, r.RequestURI, r.Header.Get("Authorization"), r.Proto})
		l.Seen.mu.Unlock()
		if r.URL.Path == "/echo" {
			a := r.Header.Get("Authorization")
			w.Header().Set("X-Echo", a)
			fmt.Fprintf(w, "you sent %s; near %s!\n", a, a[:len(a)-2])
			return
		}
		fmt.Fprintf(w, "%s %s\n", r.Method, r.RequestURI)
	})
	if _, err := l.API.ServeHTTPS(443, api, "api.web.test", "web.test"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.API.ServeHTTP(80, api); err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(lab.Dir(), "www")
	var err error
	if l.Git, err = testhosts.BuildGitRepo(ctx, root); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "b.bin"), testhosts.Body(inspectBodySize, inspectBodySeed), 0o644); err != nil {
		t.Fatal(err)
	}
	// Near misses of the key must arrive as they are; the key itself masked.
	k := l.Key
	l.Near = strings.Repeat("x", 5000) + k[:len(k)-1] + "!" + k[1:] + " " + strings.ToUpper(k) + " " + k[:6] + "\n" + k + "\n" + k[:len(k)-1]
	if err := os.WriteFile(filepath.Join(root, "near.txt"), []byte(l.Near), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Files.ServeNginx(ctx, testhosts.NginxOptions{Root: root, Port: 443, GitRoot: l.Git.GitRoot,
		TLSNames: []string{"files.web.test", "spliced.web.test"}}); err != nil {
		t.Fatal(err)
	}
	answers := map[string][]netip.Addr{
		"api.web.test": {l.API.Addr}, "web.test": {l.API.Addr}, "badcert.web.test": {l.API.Addr},
		"files.web.test": {l.Files.Addr}, "spliced.web.test": {l.Files.Addr},
	}
	if l.DNS, err = l.NS.ServeDNS(53, answers); err != nil {
		t.Fatal(err)
	}
	// The key lives where the run could otherwise read it: outside /tmp,
	// which the run gets fresh.
	dir, err := os.MkdirTemp("/var/tmp", "postern-inspect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	l.KeyFile = filepath.Join(dir, "key")
	if err := os.WriteFile(l.KeyFile, []byte(l.Key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *inspectLab) policy(t *testing.T) string {
	t.Helper()
	return writeFile(t, "inspect.hcl", fmt.Sprintf(`ports = [80, 443]
allow = ["web.test"]
allow_cidrs = [%q]

inspect "api.web.test" {
  allow_methods = ["GET", "HEAD", "POST"]
  allow_paths   = ["/repos/acme/**", "/echo"]
  deny_paths    = ["/repos/acme/*/actions/**"]
  inject_header = { Authorization = "env:POSTERN_E2E_TOKEN" }
}

inspect "files.web.test" {
  allow_methods = ["GET", "HEAD", "POST"]
  inject_header = { X-Api-Key = "file:%s" }
}

inspect "badcert.web.test" {
}
`, l.Subnet(), l.KeyFile))
}

func (l *inspectLab) poster(t *testing.T) poster {
	t.Helper()
	return poster{Home: measuredHome(t), Dir: workDir(t, map[string]string{"ca.pem": l.CAFile()}),
		Env: []string{"POSTERN_E2E_TOKEN=" + l.Token}}
}

func (l *inspectLab) flags(t *testing.T) []string {
	return []string{"--policy", l.policy(t), "--resolver", l.DNS.Addr.String(), "--upstream-ca", l.CAFile()}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var shaRE = regexp.MustCompile(`(?m)^sha=([0-9a-f]{64}) status=(\S+)`)

// fetched is the sha256 and status a client step printed as "sha=… status=…".
func fetched(out string) (sha, status string) {
	m := shaRE.FindStringSubmatch(out)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

func TestInspectEndToEnd(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireTool(t, "curl", "curl")
	testhosts.RequireTool(t, "python3", "python3-requests")
	testhosts.RequireTool(t, "node", "nodejs")
	if err := exec.Command("/usr/bin/python3", "-c", "import requests").Run(); err != nil {
		t.Fatalf("Debian's python3 has no requests module (apt-get install python3-requests): %v", err)
	}
	l := newInspectLab(t)
	p := l.poster(t)
	bodySHA := testhosts.BodySHA256(inspectBodySize, inspectBodySeed)
	mask := strings.Repeat("*", len(l.Key))
	nearWant := strings.ReplaceAll(l.Near, l.Key, mask)

	py := func(method, url string) string {
		return `/usr/bin/python3 -c 'import hashlib, requests; r = requests.request("` + method + `", "` + url + `", timeout=10); print("sha=%s status=%d" % (hashlib.sha256(r.content).hexdigest(), r.status_code))'`
	}
	node := func(method, url string) string {
		return `node -e 'fetch("` + url + `", {method: "` + method + `"}).then(async r => { const b = Buffer.from(await r.arrayBuffer()); console.log("sha=" + require("crypto").createHash("sha256").update(b).digest("hex") + " status=" + r.status) }).catch(e => { console.log("error", e.cause || e); process.exit(1) })'`
	}
	script := curlStep("h2", "--http2", "-w", "\\nhttp=%{http_code}\\nproto=%{http_version}\\n", "https://api.web.test/repos/acme/widgets?page=2", "-H", "Authorization: the run's own") +
		curlStep("delete", "-X", "DELETE", "https://api.web.test/repos/acme/widgets") +
		curlStep("denypath", "--path-as-is", "https://api.web.test/repos/acme/w/actions/runs") +
		curlStep("encoded", "https://api.web.test/repos/acme/w%2Factions/runs") +
		curlStep("climb", "--path-as-is", "https://api.web.test/repos/acme/../other") +
		curlStep("echo", "-D", "-", "https://api.web.test/echo") +
		curlStep("plain", "http://api.web.test/repos/other") +
		step("near", "curl -sS https://files.web.test/near.txt -o near.out; echo \"sha=$(sha256sum < near.out | cut -d' ' -f1) status=x\"") +
		step("python", py("GET", "https://files.web.test/b.bin")) +
		step("pythondeny", py("DELETE", "https://api.web.test/repos/acme/widgets")) +
		step("node", node("GET", "https://files.web.test/b.bin")) +
		step("nodedeny", node("DELETE", "https://api.web.test/repos/acme/widgets")) +
		step("git", "git -c protocol.version=2 clone -q https://files.web.test"+l.Git.SmartPath+" repo && git -C repo rev-parse HEAD") +
		step("spliced", `/usr/bin/python3 -c 'import ssl; print(ssl.get_server_certificate(("spliced.web.test", 443)))'`) +
		curlStep("splicedpinned", "--cacert", "ca.pem", "https://spliced.web.test/b.bin", "-o", "/dev/null") +
		curlStep("pinned", "--cacert", "ca.pem", "https://api.web.test/repos/acme/x") +
		curlStep("badcert", "https://badcert.web.test/") +
		step("keyfile", "cat "+l.KeyFile) +
		step("secrets", "cat /proc/*/environ /proc/*/cmdline > proc.dump 2>/dev/null; env > env.dump; grep -c POSTERN_E2E_TOKEN env.dump") +
		step("ca", "cat /run/postern-trust/ca.pem")
	w := p.run(t, l.flags(t), script)
	if w.Run.Carry != "network-wall" {
		t.Fatalf("run: %s", w)
	}

	// Allowed, over HTTP/2, with the injected header in place of the run's.
	out := w.Out(t, "h2")
	if httpCode(out) != 200 || !strings.Contains(out, "proto=2") || !strings.Contains(out, "GET /repos/acme/widgets?page=2") {
		t.Errorf("h2: allowed request:\n%s\n%s", out, w)
	}
	if seen := l.Seen.with("/repos/acme/widgets?page=2"); len(seen) != 1 || seen[0].Auth != l.Token {
		t.Errorf("the api host saw %+v: want one request carrying the injected Authorization, not the run's", seen)
	}
	// Refused, each with the rule and the line to change.
	for _, c := range []struct{ step, want string }{
		{"delete", "postern door denied DELETE /repos/acme/widgets on api.web.test:443\nreason: method not in allow_methods\nrule: allow_methods = [\"GET\", \"HEAD\", \"POST\"] ("},
		{"delete", "to allow it, change allow_methods at"},
		{"delete", "allow_methods = [\"GET\", \"HEAD\", \"POST\", \"DELETE\"]"},
		{"denypath", "reason: path denied by deny_paths\nrule: \"/repos/acme/*/actions/**\""},
		{"encoded", "postern door denied GET /repos/acme/w/actions/runs"},
		{"climb", "reason: path not in allow_paths"},
		{"climb", `allow_paths = ["/repos/acme/**", "/echo", "/repos/other"]`},
		{"plain", "reason: path not in allow_paths"},
	} {
		out := w.Out(t, c.step)
		if httpCode(out) != 403 || !strings.Contains(out, c.want) {
			t.Errorf("%s: want a 403 saying %q:\n%s", c.step, c.want, out)
		}
	}
	for _, r := range l.Seen.all() {
		if r.Method == "DELETE" || strings.Contains(r.URI, "actions") || strings.Contains(r.URI, "other") {
			t.Errorf("a refused request reached the api host: %+v", r)
		}
	}
	// An echoed value comes back masked, in the body and in the header.
	out = w.Out(t, "echo")
	tokMask := strings.Repeat("*", len(l.Token))
	if httpCode(out) != 200 || !strings.Contains(out, "you sent "+tokMask+"; near "+l.Token[:len(l.Token)-2]+"!") ||
		!strings.Contains(out, "X-Echo: "+tokMask) && !strings.Contains(out, "x-echo: "+tokMask) {
		t.Errorf("echo:\n%s", out)
	}
	// Bodies arrive byte for byte as a direct fetch gets them.
	if sha, _ := fetched(w.Out(t, "near")); sha != sha256Hex([]byte(nearWant)) {
		t.Errorf("near misses of the key did not arrive intact, the key masked: sha %s\n%s", sha, w.Out(t, "near"))
	}
	for _, st := range []string{"python", "node"} {
		if sha, status := fetched(w.Out(t, st)); sha != bodySHA || status != "200" {
			t.Errorf("%s: sha %s status %s, want %s 200:\n%s", st, sha, status, bodySHA, w.Out(t, st))
		}
		if _, status := fetched(w.Out(t, st+"deny")); status != "403" {
			t.Errorf("%sdeny: status %s, want 403:\n%s", st, status, w.Out(t, st+"deny"))
		}
	}
	if out := w.Out(t, "git"); rc(t, out) != 0 || !strings.Contains(out, l.Git.Head) {
		t.Errorf("git clone through the inspected host: want HEAD %s:\n%s", l.Git.Head, out)
	}
	// A spliced host shows the client its own certificate.
	direct := directCert(t, l.Files.Addr, "spliced.web.test", l.CAFile())
	blk, _ := pem.Decode([]byte(w.Out(t, "spliced")))
	if blk == nil || !bytes.Equal(blk.Bytes, direct) {
		t.Errorf("the certificate the run saw for spliced.web.test is not the server's own:\n%s", w.Out(t, "spliced"))
	}
	if out := w.Out(t, "splicedpinned"); httpCode(out) != 200 {
		t.Errorf("a client trusting only the server's CA could not reach the spliced host:\n%s", out)
	}
	// A client that will not take the door's certificate is refused, clearly.
	if out := w.Out(t, "pinned"); rc(t, out) == 0 {
		t.Errorf("a client that trusts only the server's CA got through an inspected host:\n%s", out)
	}
	ev, ok := w.Events.find(func(ev door.Event) bool {
		return ev.Host == "api.web.test" && ev.Decision == "deny" && strings.HasPrefix(ev.Reason, "client refused the inspection certificate for api.web.test")
	})
	if !ok || !strings.Contains(ev.Reason, "remove api.web.test from inspect to splice it") {
		t.Errorf("no clear refusal of the pinned client: %+v\n%s", ev, w)
	}
	// An upstream whose certificate does not verify is refused.
	if out := w.Out(t, "badcert"); httpCode(out) != 502 || !strings.Contains(out, "the certificate of badcert.web.test failed verification") {
		t.Errorf("badcert:\n%s", out)
	}
	if _, ok := w.Events.find(func(ev door.Event) bool {
		return ev.Kind == "request" && ev.Host == "badcert.web.test" && ev.Decision == "deny" && strings.Contains(ev.Reason, "x509")
	}); !ok {
		t.Errorf("no refusal event for the unverifiable upstream\n%s", w)
	}

	// The run holds neither value: not in its environment, nor in any of its
	// processes', nor in the file the door read the key from.
	if out := w.Out(t, "keyfile"); rc(t, out) == 0 || strings.Contains(out, l.Key) {
		t.Errorf("the run read the key file:\n%s", out)
	}
	for _, f := range []string{"proc.dump", "env.dump"} {
		data, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil || len(data) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range []string{l.Token, strings.TrimPrefix(l.Token, "Bearer "), l.Key} {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("the run's %s holds an injected value", f)
			}
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(w.Out(t, "secrets")), "0") {
		t.Errorf("the run's environment names the token's variable:\n%s", w.Out(t, "secrets"))
	}
	// Nor does anything postern wrote: its output, the record, the events.
	home, _ := os.ReadFile(filepath.Join(p.Home, "records.db"))
	for _, v := range []string{strings.TrimPrefix(l.Token, "Bearer "), l.Key} {
		if strings.Contains(w.Stdout+w.Stderr, v) || bytes.Contains(home, []byte(v)) {
			t.Errorf("an injected value reached postern's output or records")
		}
	}
	// Each request is an event: method and path, no query, no header.
	reqs := 0
	for _, ev := range w.Events {
		if ev.Kind != "request" {
			continue
		}
		reqs++
		if strings.Contains(ev.Path, "?") || strings.Contains(ev.Path, "page=2") {
			t.Errorf("a request event kept the query: %+v", ev)
		}
	}
	if ev, ok := w.Events.find(func(ev door.Event) bool {
		return ev.Kind == "request" && ev.Method == "DELETE" && ev.Path == "/repos/acme/widgets" && ev.Decision == "deny" && ev.Reason == "method not in allow_methods"
	}); !ok {
		t.Errorf("no request event for the refused DELETE (%+v)\n%s", ev, w)
	}
	if reqs < 12 {
		t.Errorf("%d request events, want one per request\n%s", reqs, w)
	}
	if !strings.Contains(w.Stderr, "postern: denied request DELETE /repos/acme/widgets on api.web.test:443: method not in allow_methods") {
		t.Errorf("the refusal was not reported on stderr:\n%s", w.Stderr)
	}

	// The authority was trusted inside the run only.
	ca := []byte(strings.TrimSpace(strings.SplitN(w.Out(t, "ca"), "rc=", 2)[0]))
	if !bytes.Contains(ca, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("the run printed no authority:\n%s", w.Out(t, "ca"))
	}
	for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, ca[len("-----BEGIN CERTIFICATE-----"):len(ca)-len("-----END CERTIFICATE-----")]) {
			t.Errorf("the host's %s holds the run's authority", f)
		}
	}
	if _, err := os.Stat("/run/postern-trust"); err == nil {
		t.Error("/run/postern-trust exists outside the run")
	}
	// A client outside the run, given the host's own bundle, does not trust
	// a certificate from the run's authority.
	blk, _ = pem.Decode(ca)
	runCA, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if sys, err := x509.SystemCertPool(); err == nil {
		if _, err := runCA.Verify(x509.VerifyOptions{Roots: sys}); err == nil {
			t.Error("the machine's roots outside the run trust the run's authority")
		}
	}
}

// directCert is the certificate the server at addr:443 shows for name, seen
// from the host side.
func directCert(t *testing.T, addr netip.Addr, name, caFile string) []byte {
	t.Helper()
	data, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(data)
	c, err := tls.Dial("tcp", netip.AddrPortFrom(addr, 443).String(), &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

// The explicit proxy inspects too: 'postern door --ca-out' writes the
// authority its clients trust, and CONNECT to an inspected host is served
// request by request.
func TestInspectThroughTheExplicitProxy(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireTool(t, "curl", "curl")
	l := newInspectLab(t)
	caOut := filepath.Join(t.TempDir(), "door-ca.pem")
	t.Setenv("POSTERN_E2E_TOKEN", l.Token)
	d := startDoor(t, readFile(t, l.policy(t)), "", "--resolver", l.DNS.Addr.String(), "--upstream-ca", l.CAFile(), "--ca-out", caOut)
	proxy := "http://" + d.Addr
	r := curl(t, "--http2", "-x", proxy, "--cacert", caOut, "https://api.web.test/repos/acme/x")
	if r.Code != 0 || r.HTTP != 200 || !strings.Contains(r.Body, "GET /repos/acme/x") {
		t.Fatalf("allowed request through the proxy: %+v", r)
	}
	if seen := l.Seen.with("/repos/acme/x"); len(seen) != 1 || seen[0].Auth != l.Token {
		t.Errorf("the api host saw %+v", seen)
	}
	r = curl(t, "-x", proxy, "--cacert", caOut, "-X", "DELETE", "https://api.web.test/repos/acme/x")
	if r.HTTP != 403 || !strings.Contains(r.Body, "method not in allow_methods") {
		t.Errorf("DELETE through the proxy: %+v", r)
	}
	d.waitEvent(t, "the DELETE's refusal", func(ev door.Event) bool {
		return ev.Kind == "request" && ev.Method == "DELETE" && ev.Decision == "deny"
	})
	// The bodies, as a direct fetch gets them.
	out := filepath.Join(t.TempDir(), "b.bin")
	r = curl(t, "-x", proxy, "--cacert", caOut, "-o", out, "https://files.web.test/b.bin")
	got, _ := os.ReadFile(out)
	if r.HTTP != 200 || sha256Hex(got) != testhosts.BodySHA256(inspectBodySize, inspectBodySeed) {
		t.Errorf("body through the proxy: %+v, %d bytes", r, len(got))
	}
	if strings.Contains(d.Stderr(), strings.TrimPrefix(l.Token, "Bearer ")) {
		t.Error("the door logged the injected value")
	}
	for _, ev := range d.Events() {
		if strings.Contains(fmt.Sprintf("%+v", ev), strings.TrimPrefix(l.Token, "Bearer ")) {
			t.Errorf("an event holds the injected value: %+v", ev)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
