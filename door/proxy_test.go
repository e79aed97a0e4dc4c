package door

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const testPolicy = `
mode  = "enforce"
ports = [80, 443, 2222]
allow = ["a.test", "b.test", "web.test:80", "ssh.test:2222"]
deny  = ["bad.a.test"]
allow_cidrs = ["10.20.0.0/16"]
`

func TestConnectAllowAndDeny(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	echo := server(t, func(c net.Conn) { io.Copy(c, c) })
	h.route("11.0.0.1", echo)

	c, head, _ := connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("CONNECT a.test:443: %q", head)
	}
	fmt.Fprint(c, "ping")
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through tunnel: %q %v", buf, err)
	}
	c.(*net.TCPConn).CloseWrite()
	if rest, _ := io.ReadAll(c); len(rest) != 0 {
		t.Fatalf("unexpected bytes %q", rest)
	}
	if got := h.dials(); len(got) != 1 || got[0] != netip.MustParseAddrPort("11.0.0.1:443") {
		t.Fatalf("dialled %v, want exactly the pinned, checked address 11.0.0.1:443", got)
	}
	if l := h.looked(); len(l) != 0 {
		t.Fatalf("pinned name was looked up: %v", l)
	}
	ev := h.ev.waitFor(t, "decision", func(e Event) bool { return e.Event == "decision" && e.Host == "a.test" })
	if ev.Decision != "allow" || ev.Kind != "connect" || ev.Addr != "11.0.0.1" || ev.Port != 443 || ev.Run != "test-run" || ev.Mode != "enforce" {
		t.Fatalf("decision event %+v", ev)
	}
	end := h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.Conn == ev.Conn })
	if end.BytesUp != 4 || end.BytesDown != 4 {
		t.Fatalf("end event counts %+v, want 4 up 4 down", end)
	}

	// Denied by a deny rule: never resolved, 403 with a body a model can act on.
	_, head, body := connectVia(t, h.proxy, "bad.a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(head, `X-Postern-Decision: deny; reason="denied by rule"`) {
		t.Fatalf("CONNECT bad.a.test: head %q", head)
	}
	for _, want := range []string{"denied CONNECT bad.a.test:443", "reason: denied by rule", "policy: test.hcl (mode enforce)", "no allow line overrides"} {
		if !strings.Contains(body, want) {
			t.Errorf("deny body lacks %q:\n%s", want, body)
		}
	}
	// Not allowed: the body carries the exact line that would allow it.
	_, head, body = connectVia(t, h.proxy, "other.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(body, `allow = ["other.test:443"]`) {
		t.Fatalf("CONNECT other.test: %q\n%s", head, body)
	}
	// The hard floor, in any spelling: nothing can allow it.
	_, head, body = connectVia(t, h.proxy, "0x7f000001:443")
	if !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(body, "hard floor: loopback") || !strings.Contains(body, "nothing can allow it") {
		t.Fatalf("CONNECT 0x7f000001: %q\n%s", head, body)
	}
	if l := h.looked(); len(l) != 0 {
		t.Fatalf("denied names were looked up: %v", l)
	}
	if got := h.dials(); len(got) != 1 {
		t.Fatalf("denied targets were dialled: %v", got)
	}
}

func TestConnectPortSmuggling(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"web.test": {netip.MustParseAddr("11.0.0.2")}}
	})
	h.route("11.0.0.2", server(t, func(c net.Conn) {}))
	// web.test is allowed on :80 only.
	_, head, body := connectVia(t, h.proxy, "web.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(body, "web.test:443") {
		t.Fatalf("CONNECT web.test:443 must be judged on 443: %q\n%s", head, body)
	}
	_, head, _ = connectVia(t, h.proxy, "web.test:22")
	if !strings.HasPrefix(head, "HTTP/1.1 403") {
		t.Fatalf("CONNECT web.test:22: %q", head)
	}
	// Junk in the authority is refused, not guessed at.
	_, head, _ = connectVia(t, h.proxy, "evil.test:443.a.test")
	if !strings.HasPrefix(head, "HTTP/1.1 403") && !strings.HasPrefix(head, "HTTP/1.1 400") {
		t.Fatalf("CONNECT evil.test:443.a.test: %q", head)
	}
	if got := h.dials(); len(got) != 0 {
		t.Fatalf("dialled %v", got)
	}
}

func TestDecideRebindingAndResolution(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy))
	h.lookupResult("a.test", "11.0.0.3", "10.9.9.9") // public + private: rebinding
	h.lookupResult("b.test", "11.0.0.4", "2600::4")
	h.lookupResult("evil.a.test", "127.0.0.1")
	ctx := context.Background()

	j := h.d.Decide(ctx, hostOf(t, "a.test"), 443)
	if j.Allowed() || j.Addr != netip.MustParseAddr("10.9.9.9") || len(j.Addrs) != 0 {
		t.Fatalf("a name resolving to a private address must be denied on it: %+v", j)
	}
	j = h.d.Decide(ctx, hostOf(t, "evil.a.test"), 443)
	if j.Allowed() || !j.Decision.Floor {
		t.Fatalf("a name resolving to loopback: %+v", j)
	}
	j = h.d.Decide(ctx, hostOf(t, "b.test"), 443)
	if !j.Allowed() || len(j.Addrs) != 2 {
		t.Fatalf("b.test: %+v", j)
	}
	j = h.d.Decide(ctx, hostOf(t, "bad.a.test"), 443)
	if j.Allowed() {
		t.Fatalf("bad.a.test allowed: %+v", j)
	}
	j = h.d.Decide(ctx, hostOf(t, "nx.a.test"), 443)
	if j.Allowed() || !strings.Contains(j.Decision.Reason, "cannot resolve") {
		t.Fatalf("unresolvable: %+v", j)
	}
	j = h.d.Decide(ctx, hostOf(t, "10.20.3.4"), 443)
	if !j.Allowed() || len(j.Addrs) != 1 {
		t.Fatalf("literal in allow_cidrs: %+v", j)
	}
	want := []string{"a.test", "evil.a.test", "b.test", "nx.a.test"}
	if got := h.looked(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("looked up %v, want %v (bad.a.test must never be resolved)", got, want)
	}
}

func TestHTTPKeepAliveTwoHosts(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}, "b.test": {netip.MustParseAddr("11.0.0.6")}}
	})
	seenA, seenB := make(chan string, 4), make(chan string, 4)
	h.route("11.0.0.5", httpServer(t, "A", seenA))
	h.route("11.0.0.6", httpServer(t, "B", seenB))

	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send := func(req string) *http.Response {
		t.Helper()
		resp, body := roundTrip(t, c, br, req)
		resp.Header.Set("X-Body", body)
		return resp
	}
	r1 := send("GET http://a.test/one?x=1 HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nConnection: X-Drop\r\nX-Drop: 1\r\nUser-Agent: t\r\n\r\n")
	r2 := send("GET http://b.test/two HTTP/1.1\r\nHost: b.test\r\nUser-Agent: t\r\n\r\n")
	r3 := send("GET http://a.test/three HTTP/1.1\r\nHost: a.test:80\r\nUser-Agent: t\r\n\r\n")
	if r1.StatusCode != 200 || !strings.Contains(r1.Header.Get("X-Body"), "hello from A: GET /one?x=1 HTTP/1.1 host=a.test") {
		t.Fatalf("first request: %d %q", r1.StatusCode, r1.Header.Get("X-Body"))
	}
	if r2.StatusCode != 200 || !strings.Contains(r2.Header.Get("X-Body"), "hello from B: GET /two HTTP/1.1 host=b.test") {
		t.Fatalf("second request: %d %q", r2.StatusCode, r2.Header.Get("X-Body"))
	}
	if r3.StatusCode != 200 || !strings.Contains(r3.Header.Get("X-Body"), "hello from A: GET /three") {
		t.Fatalf("third request: %d %q", r3.StatusCode, r3.Header.Get("X-Body"))
	}
	head := <-seenA
	for _, banned := range []string{"Proxy-Connection", "Proxy-Authorization", "X-Drop", "Connection: X-Drop"} {
		if strings.Contains(head, banned) {
			t.Errorf("upstream saw hop-by-hop header %q:\n%s", banned, head)
		}
	}
	// Denied request on the same connection: 403, and the connection lives on.
	r4 := send("GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if r4.StatusCode != 403 || !strings.Contains(r4.Header.Get("X-Body"), `allow = ["other.test:80"]`) || !strings.HasPrefix(r4.Header.Get("X-Postern-Decision"), "deny;") {
		t.Fatalf("denied request: %d %v %q", r4.StatusCode, r4.Header, r4.Header.Get("X-Body"))
	}
	r5 := send("GET http://b.test/five HTTP/1.1\r\nHost: b.test\r\n\r\n")
	if r5.StatusCode != 200 {
		t.Fatalf("request after a denial: %d", r5.StatusCode)
	}
	var kinds []string
	for _, ev := range h.ev.all() {
		if ev.Event == "decision" {
			kinds = append(kinds, string(ev.Kind)+":"+ev.Host+":"+string(ev.Decision))
		}
	}
	want := "http:a.test:allow,http:b.test:allow,http:a.test:allow,http:other.test:deny,http:b.test:allow"
	if strings.Join(kinds, ",") != want {
		t.Fatalf("decisions %v, want %s", kinds, want)
	}
}

func TestHTTPHostMismatch(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", httpServer(t, "A", nil))
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://a.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(b), "does not match request target a.test") {
		t.Fatalf("host mismatch: %d %s", resp.StatusCode, b)
	}
	h.ev.waitFor(t, "deny", func(e Event) bool {
		return e.Decision == "deny" && e.Kind == "http" && strings.Contains(e.Reason, "other.test")
	})
	if len(h.dials()) != 0 {
		t.Fatalf("dialled on a mismatched request: %v", h.dials())
	}
}

func TestCurlThroughProxy(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required for this test")
	}
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}, "b.test": {netip.MustParseAddr("11.0.0.6")}}
	})
	h.route("11.0.0.5", httpServer(t, "A", nil))
	h.route("11.0.0.6", httpServer(t, "B", nil))
	out, err := exec.Command("curl", "-sS", "--max-time", "5", "-x", "http://"+h.proxy,
		"http://a.test/x", "http://b.test/y", "-w", "%{http_code} %{num_connects}\n").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "hello from A: GET /x") || !strings.Contains(s, "hello from B: GET /y") || strings.Count(s, "200 ") != 2 {
		t.Fatalf("curl output:\n%s", s)
	}
	// curl reuses its one proxy connection for both hosts.
	if !strings.Contains(s, "200 0") {
		t.Errorf("curl did not reuse the proxy connection:\n%s", s)
	}
	out, _ = exec.Command("curl", "-sS", "--max-time", "5", "-x", "http://"+h.proxy, "-D", "-", "http://other.test/").CombinedOutput()
	if !strings.Contains(string(out), "403 Forbidden") || !strings.Contains(string(out), `allow = ["other.test:80"]`) {
		t.Fatalf("curl denied:\n%s", out)
	}
}

func TestConnectServerSpeaksFirst(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"ssh.test": {netip.MustParseAddr("11.0.0.7")}}
	})
	h.route("11.0.0.7", server(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-test\r\n")
		io.Copy(c, c)
	}))
	c, head, _ := connectVia(t, h.proxy, "ssh.test:2222")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("banner before the client spoke: %q %v", line, err)
	}
}

func TestConnectSNI(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.8")}}
	})
	cert := selfSigned(t, "a.test", "b.test")
	tlsAddr := server(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		if err := tc.Handshake(); err != nil {
			return
		}
		io.WriteString(tc, "hello over tls\n")
	})
	h.route("11.0.0.8", tlsAddr)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)

	// Matching server name: the handshake completes through the tunnel.
	c, head, _ := connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "a.test", RootCAs: pool})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil || line != "hello over tls\n" {
		t.Fatalf("tls through tunnel: %q %v", line, err)
	}

	// Fronting: CONNECT to a.test, ClientHello names b.test.
	c, head, _ = connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	tc = tls.Client(c, &tls.Config{ServerName: "b.test", RootCAs: pool})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with a mismatched server name completed")
	}
	ev := h.ev.waitFor(t, "sni deny", func(e Event) bool { return e.Event == "decision" && e.Decision == "deny" })
	if ev.Reason != "tls sni b.test does not match admitted host a.test" || ev.Kind != "connect" {
		t.Fatalf("deny event %+v", ev)
	}
}

func selfSigned(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func TestConnectObserveMode(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `mode = "observe"
ports = [443]
allow = ["a.test"]
`), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"other.test": {netip.MustParseAddr("11.0.0.1")}, "lo.test": {netip.MustParseAddr("127.0.0.1")}}
	})
	h.route("11.0.0.1", server(t, func(c net.Conn) { io.Copy(c, c) }))
	if _, head, _ := connectVia(t, h.proxy, "other.test:443"); !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("observe mode refused: %q", head)
	}
	ev := h.ev.waitFor(t, "would deny", func(e Event) bool { return e.Event == "decision" && e.Host == "other.test" })
	if !ev.WouldDeny || ev.Decision != "allow" || ev.Mode != "observe" || ev.Reason != "no allow rule matches" {
		t.Fatalf("observe event %+v", ev)
	}
	// The hard floor holds in observe mode.
	if _, head, body := connectVia(t, h.proxy, "lo.test:443"); !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(body, "mode observe") {
		t.Fatalf("observe mode opened the floor: %q %s", head, body)
	}
}

// TestConnectPlainHTTPEveryRequestPinned sends plain HTTP through a CONNECT
// tunnel: requests for the admitted host go through on one kept-alive
// connection, and a later request naming another host on the same tunnel is
// refused with a 403 and never reaches the server (a vhost on the same
// address would otherwise be reached past the policy).
func TestConnectPlainHTTPEveryRequestPinned(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	seen := make(chan string, 8)
	h.route("11.0.0.5", httpServer(t, "A", seen))
	c, head, _ := connectVia(t, h.proxy, "a.test:80")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	br := bufio.NewReader(c)
	send := func(req string) (*http.Response, string) {
		t.Helper()
		return roundTrip(t, c, br, req)
	}
	for _, path := range []string{"/one", "/two"} {
		resp, body := send("GET " + path + " HTTP/1.1\r\nHost: a.test\r\n\r\n")
		if resp.StatusCode != 200 || !strings.Contains(body, "hello from A: GET "+path) {
			t.Fatalf("%s through the tunnel: %d %q", path, resp.StatusCode, body)
		}
		<-seen
	}
	resp, body := send("GET /secret HTTP/1.1\r\nHost: b.test\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, "does not match admitted host a.test") {
		t.Fatalf("a request for another host on the tunnel: %d %q", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the tunnel stayed open after a request for another host")
	}
	select {
	case got := <-seen:
		t.Fatalf("the server saw the request for another host:\n%s", got)
	default:
	}
	h.ev.waitFor(t, "the refusal", func(e Event) bool {
		return e.Kind == "connect" && e.Decision == "deny" && strings.Contains(e.Reason, "b.test")
	})
	end := h.ev.waitFor(t, "the tunnel's end", func(e Event) bool { return e.Event == "end" && e.Kind == "connect" })
	if end.BytesUp == 0 || end.BytesDown == 0 {
		t.Errorf("end event without the bytes the tunnel carried: %+v", end)
	}
}
