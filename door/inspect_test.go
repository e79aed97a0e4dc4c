package door

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The door's inspection against Go's own TLS client and server: the
// plumbing, every refusal and what each records. The capability against
// clients and servers nobody here wrote is proven end to end in
// cmd/postern (inspect_e2e_test.go).

const inspectPolicy = `
ports = [80, 443]
allow = ["api.test", "spliced.test"]
allow_cidrs = ["11.0.0.0/24"]

inspect "api.test" {
  allow_methods = ["GET", "POST", "HEAD"]
  allow_paths   = ["/repos/acme/**", "/echo/**"]
  deny_paths    = ["/repos/acme/*/actions/**"]
  inject_header = { Authorization = "env:POSTERN_TEST_TOKEN" }
}
`

// The injected value, and near misses of it that must pass unchanged.
const (
	testToken    = "Bearer tok-4f1c9a7e2b"
	testTokenBit = "tok-4f1c9a7e2b"
)

// upstreamLog records what an inspected upstream received.
type upstreamLog struct {
	mu   sync.Mutex
	reqs []seenRequest
}

type seenRequest struct {
	Method, URI, Host, Auth, AcceptEncoding, Proto, Upgrade string
}

func (l *upstreamLog) all() []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenRequest(nil), l.reqs...)
}

// upstreamHandler answers with what it saw; under /echo/ it echoes the
// Authorization header back in a header, a trailer and the body, with the
// body written in pieces that split the value.
func upstreamHandler(log *upstreamLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.mu.Lock()
		log.reqs = append(log.reqs, seenRequest{r.Method, r.RequestURI, r.Host, r.Header.Get("Authorization"), r.Header.Get("Accept-Encoding"), r.Proto, r.Header.Get("Upgrade")})
		log.mu.Unlock()
		auth := r.Header.Get("Authorization")
		switch {
		case strings.HasPrefix(r.URL.Path, "/echo/split"):
			w.Header().Set("Trailer", "X-Echo-Trailer")
			w.Header().Set("X-Echo", "got "+auth)
			body := "near " + auth[:len(auth)-1] + "! then " + auth + " and " + testTokenBit + " end"
			fl := http.NewResponseController(w)
			for i := 0; i < len(body); i += 3 {
				io.WriteString(w, body[i:min(i+3, len(body))])
				fl.Flush()
			}
			w.Header().Set("X-Echo-Trailer", auth)
			return
		case strings.HasPrefix(r.URL.Path, "/echo/gzip"):
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "zipped "+auth)
			zw.Close()
			return
		case strings.HasPrefix(r.URL.Path, "/echo/br"):
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "not really brotli "+auth)
			return
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.RequestURI, r.Proto)
	})
}

// tlsUpstream serves handler over TLS (HTTP/2 and HTTP/1.1) on loopback with a
// certificate for name from ca.
func tlsUpstream(t *testing.T, ca *Authority, name string, handler http.Handler, clientAuth tls.ClientAuthType) string {
	return tlsUpstreamServer(t, ca, name, handler, clientAuth, false)
}

// tlsUpstreamServer is tlsUpstream, speaking only HTTP/1.1 if h1.
func tlsUpstreamServer(t *testing.T, ca *Authority, name string, handler http.Handler, clientAuth tls.ClientAuthType, h1 bool) string {
	t.Helper()
	cert, err := ca.leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	srv := &http.Server{Handler: handler, ErrorLog: discardLog,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: clientAuth}}
	if h1 {
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { srv.Close(); <-done })
	return l.Addr().String()
}

// inspectLab is a door inspecting api.test, whose upstream (and that of
// spliced.test) is a loopback TLS server with certificates from upstreamCA.
type inspectLab struct {
	*harness
	upstreamCA *Authority
	roots      string // upstreamCA's PEM file
	log        *upstreamLog
}

func newInspectLab(t *testing.T, clientAuth tls.ClientAuthType, opts ...harnessOpt) *inspectLab {
	t.Helper()
	t.Setenv("POSTERN_TEST_TOKEN", testToken)
	uca, err := NewAuthority([]string{"api.test", "spliced.test"})
	if err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(roots, uca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	l := &inspectLab{upstreamCA: uca, roots: roots, log: &upstreamLog{}}
	opts = append([]harnessOpt{func(c *Config) {
		c.UpstreamRoots = roots
		c.AddHosts = map[string][]netip.Addr{"api.test": {netip.MustParseAddr("11.0.0.1")}, "spliced.test": {netip.MustParseAddr("11.0.0.2")}}
	}}, opts...)
	l.harness = newHarness(t, mustPolicy(t, inspectPolicy), opts...)
	l.route("11.0.0.1", tlsUpstream(t, uca, "api.test", upstreamHandler(l.log), clientAuth))
	l.route("11.0.0.2", tlsUpstream(t, uca, "spliced.test", upstreamHandler(l.log), tls.NoClientCert))
	return l
}

// client is an HTTPS client through the door's explicit proxy that trusts
// roots; h2 asks for HTTP/2.
func (l *inspectLab) client(t *testing.T, roots *x509.CertPool, h2 bool) *http.Client {
	t.Helper()
	proxy, _ := url.Parse("http://" + l.proxy)
	tr := &http.Transport{
		Proxy:              http.ProxyURL(proxy),
		TLSClientConfig:    &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (l *inspectLab) doorRoots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(l.d.insp.ca.Certificate())
	return p
}

func get(t *testing.T, c *http.Client, method, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestInspectJudgesEachRequest(t *testing.T) {
	checkNoLeaks(t)
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			l := newInspectLab(t, tls.NoClientCert)
			c := l.client(t, l.doorRoots(), h2)
			proto := "HTTP/1.1"
			if h2 {
				proto = "HTTP/2.0"
			}

			resp, body := get(t, c, "GET", "https://api.test/repos/acme/widgets?per_page=5", "Authorization", "the client's own")
			if resp.StatusCode != 200 || resp.Proto != proto || body != "GET /repos/acme/widgets?per_page=5 HTTP/2.0" {
				t.Fatalf("allowed request: %d %s %q", resp.StatusCode, resp.Proto, body)
			}
			seen := l.log.all()
			if len(seen) != 1 || seen[0].Auth != testToken || seen[0].Host != "api.test" {
				t.Fatalf("upstream saw %+v: want the injected header in place of the client's", seen)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != l.d.insp.ca.Certificate().Subject.CommonName {
				t.Errorf("the client did not see the run's certificate for an inspected host")
			}

			for _, c2 := range []struct{ method, path, reason, text string }{
				{"DELETE", "/repos/acme/widgets", "method not in allow_methods",
					"to allow it, change allow_methods at test.hcl:7:3 in test.hcl to:\n  allow_methods = [\"GET\", \"POST\", \"HEAD\", \"DELETE\"]"},
				{"GET", "/repos/acme/widgets/actions/runs", "path denied by deny_paths", "no allow_paths entry overrides a deny_paths entry"},
				{"GET", "/repos/acme/widgets%2Factions/runs", "path denied by deny_paths", "rule: \"/repos/acme/*/actions/**\" (test.hcl:9:20)"},
				{"GET", "/repos/ACME/widgets/Actions/runs", "path denied by deny_paths", ""},
				{"GET", "/repos/acme/../other/x", "path not in allow_paths",
					"change allow_paths at test.hcl:8:3 in test.hcl to:\n  allow_paths = [\"/repos/acme/**\", \"/echo/**\", \"/repos/other/x\"]"},
				{"GET", "/repos%2facme%2f..%2fother", "path not in allow_paths", ""},
			} {
				u := "https://api.test" + c2.path
				req, _ := http.NewRequest(c2.method, u, nil)
				req.URL.RawPath = c2.path // keep the spelling exactly as written
				req.URL.Path, _ = url.PathUnescape(c2.path)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", c2.method, c2.path, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get("X-Postern-Decision"), c2.reason) ||
					!strings.Contains(string(b), "postern door denied "+c2.method) || !strings.Contains(string(b), c2.text) {
					t.Errorf("%s %s: %d %q\n%s", c2.method, c2.path, resp.StatusCode, resp.Header.Get("X-Postern-Decision"), b)
				}
			}
			if seen := l.log.all(); len(seen) != 1 {
				t.Errorf("refused requests reached the upstream: %+v", seen[1:])
			}

			// A request naming another host on the connection is refused.
			resp, body = get(t, c, "GET", "https://api.test/repos/acme/x", "Host", "spliced.test")
			if resp.StatusCode != 403 || !strings.Contains(body, "http host spliced.test does not match inspected host api.test:443") {
				t.Errorf("a request for another host on an inspected connection: %d %q", resp.StatusCode, body)
			}

			evs := l.ev.all()
			var reqs []Event
			for _, ev := range evs {
				if ev.Kind == "request" {
					reqs = append(reqs, ev)
				}
			}
			if len(reqs) < 8 {
				t.Fatalf("request events: %+v", reqs)
			}
			if e := reqs[0]; e.Decision != "allow" || e.Method != "GET" || e.Path != "/repos/acme/widgets" || e.Host != "api.test" || e.Port != 443 ||
				e.Rule != `"/repos/acme/**" (test.hcl:8:20)` || e.Run != "test-run" {
				t.Errorf("first request event: %+v", e)
			}
			if e := reqs[1]; e.Decision != "deny" || e.Method != "DELETE" || e.Reason != "method not in allow_methods" || e.Rule != `allow_methods = ["GET", "POST", "HEAD"] (test.hcl:7:3)` {
				t.Errorf("DELETE event: %+v", e)
			}
			if e := reqs[3]; e.Path != "/repos/acme/widgets/actions/runs" {
				t.Errorf("an encoded slash is recorded as the path that was judged: %+v", e)
			}
			all, _ := json.Marshal(evs)
			for _, bad := range []string{testTokenBit, "per_page", "the client's own"} {
				if bytes.Contains(all, []byte(bad)) {
					t.Errorf("events hold %q: %s", bad, all)
				}
			}
		})
	}
}

func TestInspectRemovesEchoedValues(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	c := l.client(t, l.doorRoots(), true)
	mask := strings.Repeat("*", len(testToken))
	bitMask := strings.Repeat("*", len(testTokenBit))

	resp, body := get(t, c, "GET", "https://api.test/echo/split")
	want := "near " + testToken[:len(testToken)-1] + "! then " + mask + " and " + bitMask + " end"
	if resp.StatusCode != 200 || body != want {
		t.Fatalf("echoed body:\n got %q\nwant %q", body, want)
	}
	if got := resp.Header.Get("X-Echo"); got != "got "+mask {
		t.Errorf("echoed header %q", got)
	}
	if got := resp.Trailer.Get("X-Echo-Trailer"); got != mask {
		t.Errorf("echoed trailer %q", got)
	}

	// A gzip body is read as the server wrote it; the client gets it decoded.
	resp, body = get(t, c, "GET", "https://api.test/echo/gzip", "Accept-Encoding", "gzip")
	if resp.StatusCode != 200 || body != "zipped "+mask || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip echo: %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Encoding"))
	}
	if seen := l.log.all(); seen[len(seen)-1].AcceptEncoding != "gzip" {
		t.Errorf("the door asked for %q, want gzip, which it can read", seen[len(seen)-1].AcceptEncoding)
	}
	// An encoding the door cannot read is refused rather than passed.
	resp, body = get(t, c, "GET", "https://api.test/echo/br")
	if resp.StatusCode != 502 || strings.Contains(body, testTokenBit) || !strings.Contains(body, "cannot read") {
		t.Errorf("br echo: %d %q", resp.StatusCode, body)
	}
	l.ev.waitFor(t, "encoding refusal", func(e Event) bool {
		return e.Kind == "request" && e.Decision == "deny" && strings.Contains(e.Reason, "cannot read")
	})
}

func TestInspectSplicesOtherHosts(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	up := x509.NewCertPool()
	up.AddCert(l.upstreamCA.Certificate())
	c := l.client(t, up, true)
	resp, body := get(t, c, "GET", "https://spliced.test/repos/other/x")
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("spliced host: %d %q", resp.StatusCode, body)
	}
	got := resp.TLS.PeerCertificates[0]
	want, _ := l.upstreamCA.leaf("spliced.test")
	if !bytes.Equal(got.Raw, want.Leaf.Raw) {
		t.Errorf("the client saw %q issued by %q for a spliced host, not the upstream's own certificate", got.Subject, got.Issuer)
	}
	if seen := l.log.all(); len(seen) != 1 || seen[0].Auth != "" {
		t.Errorf("spliced request reached the upstream as %+v", seen)
	}
	for _, ev := range l.ev.all() {
		if ev.Kind == "request" {
			t.Errorf("a spliced connection was judged request by request: %+v", ev)
		}
	}
}

func TestInspectRefusesClientThatRejectsTheCertificate(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	up := x509.NewCertPool()
	up.AddCert(l.upstreamCA.Certificate()) // trusts the real host only: as a pinned client does
	c := l.client(t, up, true)
	if _, err := c.Get("https://api.test/repos/acme/x"); err == nil {
		t.Fatal("a client that does not trust the run's authority got through an inspected host")
	}
	ev := l.ev.waitFor(t, "handshake refusal", func(e Event) bool { return e.Kind == "connect" && e.Decision == "deny" })
	want := "client refused the inspection certificate for api.test (tls: bad certificate): it may pin its certificate; remove api.test from inspect to splice it"
	if ev.Reason != want || ev.Rule != `inspect "api.test" (test.hcl:6:9)` {
		t.Errorf("event %+v\nwant reason %q", ev, want)
	}
	if seen := l.log.all(); len(seen) != 0 {
		t.Errorf("the upstream was reached: %+v", seen)
	}
}

func TestInspectRefusesUnverifiedUpstream(t *testing.T) {
	checkNoLeaks(t)
	// Without the upstream's authority among its roots, the door cannot
	// verify the host and refuses it.
	l := newInspectLab(t, tls.NoClientCert, func(c *Config) { c.UpstreamRoots = "" })
	c := l.client(t, l.doorRoots(), true)
	resp, body := get(t, c, "GET", "https://api.test/repos/acme/x")
	if resp.StatusCode != 502 || !strings.Contains(body, "the certificate of api.test failed verification") || !strings.Contains(body, "--upstream-ca") {
		t.Errorf("unverifiable upstream: %d %q", resp.StatusCode, body)
	}
	ev := l.ev.waitFor(t, "verification refusal", func(e Event) bool { return e.Kind == "request" && e.Decision == "deny" })
	if !strings.Contains(ev.Reason, "x509") || ev.Path != "/repos/acme/x" {
		t.Errorf("event %+v", ev)
	}
	if seen := l.log.all(); len(seen) != 0 {
		t.Errorf("a request went to an unverified upstream: %+v", seen)
	}
}

func TestInspectRefusesUpstreamAskingForClientCertificate(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.RequireAnyClientCert)
	c := l.client(t, l.doorRoots(), true)
	resp, body := get(t, c, "GET", "https://api.test/repos/acme/x")
	if resp.StatusCode != 502 || !strings.Contains(body, "asked for a client certificate") || !strings.Contains(body, "remove api.test from inspect") {
		t.Errorf("mutual tls upstream: %d %q", resp.StatusCode, body)
	}
	l.ev.waitFor(t, "client certificate refusal", func(e Event) bool {
		return e.Kind == "request" && e.Decision == "deny" && strings.Contains(e.Reason, "client certificate")
	})
}

func TestInspectHoldsPlainHTTPToTheRules(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	seen := make(chan string, 4)
	l.route("11.0.0.1", httpServer(t, "api", seen))
	proxy, _ := url.Parse("http://" + l.proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()

	resp, body := get(t, c, "GET", "http://api.test/repos/other")
	if resp.StatusCode != 403 || !strings.Contains(body, "path not in allow_paths") {
		t.Errorf("plain request outside allow_paths: %d %q", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", "http://api.test/x/../repos/acme/y", nil)
	req.URL.RawPath = "/x/../repos/acme/y"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("plain request inside allow_paths: %d", resp.StatusCode)
	}
	head := <-seen
	if !strings.HasPrefix(head, "GET /repos/acme/y HTTP/1.1") || strings.Contains(head, "Authorization") {
		t.Errorf("upstream saw %q: want the judged path, and no injected header over plain http", head)
	}
}

func TestInspectTransparent(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	fake, err := l.d.fakes.addr("api.test", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{netip.AddrPortFrom(fake, 443).String(), "11.0.0.1:443"} {
		c := l.dialTransparent(dst)
		tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: l.doorRoots(), NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(tc, "DELETE /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n")
		b := make([]byte, 4096)
		n, _ := io.ReadAtLeast(tc, b, 12)
		if !strings.HasPrefix(string(b[:n]), "HTTP/1.1 403") {
			t.Errorf("transparent %s: DELETE got %q", dst, b[:n])
		}
		tc.Close()
	}
	if seen := l.log.all(); len(seen) != 0 {
		t.Errorf("upstream reached: %+v", seen)
	}
	n := 0
	for _, ev := range l.ev.all() {
		if ev.Kind == "request" && ev.Method == "DELETE" && ev.Decision == "deny" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("want two refused DELETEs, by name and by address with the name in its hello; events %+v", l.ev.all())
	}
}

func TestInspectDropsH2CUpgrade(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	// An upstream on HTTP/1.1, which could take the upgrade.
	l.route("11.0.0.1", tlsUpstreamServer(t, l.upstreamCA, "api.test", upstreamHandler(l.log), tls.NoClientCert, true))
	c := l.client(t, l.doorRoots(), false)
	resp, _ := get(t, c, "GET", "https://api.test/repos/acme/x", "Connection", "Upgrade", "Upgrade", "h2c")
	if resp.StatusCode != 200 || !strings.Contains(resp.Status, "200") {
		t.Fatal(resp.Status)
	}
	if seen := l.log.all(); len(seen) != 1 || seen[0].Upgrade != "" {
		t.Errorf("the upstream was asked to upgrade: %+v", seen)
	}
}

func TestInspectRefusesOpaqueBytes(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	c, head, _ := connectVia(t, l.proxy, "api.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	fmt.Fprint(c, "SSH-2.0-OpenSSH_9.2\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("opaque bytes to an inspected host got %q", b)
	}
	l.ev.waitFor(t, "opaque refusal", func(e Event) bool {
		return e.Kind == "connect" && e.Decision == "deny" && strings.Contains(e.Reason, "neither tls nor http")
	})
}

func TestInspectNeedsTheInjectedValue(t *testing.T) {
	pol := mustPolicy(t, inspectPolicy)
	t.Setenv("POSTERN_TEST_TOKEN", "")
	_, err := New(Config{Policy: pol})
	if err == nil || !strings.Contains(err.Error(), "inject_header Authorization for api.test (test.hcl:10:37): postern's environment has no POSTERN_TEST_TOKEN") {
		t.Errorf("New without the variable: %v", err)
	}
	t.Setenv("POSTERN_TEST_TOKEN", "short")
	if _, err := New(Config{Policy: pol}); err == nil || !strings.Contains(err.Error(), "shorter than 8 bytes") || strings.Contains(err.Error(), "short\"") {
		t.Errorf("New with a short value: %v", err)
	}
	t.Setenv("POSTERN_TEST_TOKEN", "Bearer abc\ndef-ghijkl")
	if _, err := New(Config{Policy: pol}); err == nil || strings.Contains(err.Error(), "abc") {
		t.Errorf("New with a line break: %v", err)
	}
}

func TestAuthorityVouchesOnlyForInspectedHosts(t *testing.T) {
	ca, err := NewAuthority([]string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, c := range []struct {
		name string
		ok   bool
	}{{"api.test", true}, {"v2.api.test", true}, {"evil.test", false}, {"test", false}} {
		leaf, err := ca.leaf(c.name)
		if err != nil {
			t.Fatal(err)
		}
		_, verr := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: c.name, Roots: roots})
		if (verr == nil) != c.ok {
			t.Errorf("a certificate for %s from the run's authority verifies: %v, want %v", c.name, verr == nil, c.ok)
		}
	}
	again, _ := ca.leaf("api.test")
	first, _ := ca.leaf("api.test")
	if again != first {
		t.Error("leaf certificates are not cached")
	}
	if !bytes.Contains(ca.CertPEM(), []byte("BEGIN CERTIFICATE")) || bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) {
		t.Error("CertPEM is not the certificate alone")
	}
}

func TestInspectDrains(t *testing.T) {
	checkNoLeaks(t)
	l := newInspectLab(t, tls.NoClientCert)
	c := l.client(t, l.doorRoots(), true)
	if resp, _ := get(t, c, "GET", "https://api.test/repos/acme/x"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// The kept connection ends when the door stops.
	done := make(chan struct{})
	go func() { l.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the door did not stop with an inspected connection open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://api.test/repos/acme/x", nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Error("a request went through after the door stopped")
	}
}
