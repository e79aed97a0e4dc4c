package door

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeFor asks the door's DNS for name and returns the fake address.
func fakeFor(t testing.TB, h *harness, name string) string {
	t.Helper()
	r := ask(t, "udp", h.dnsUDP, name, dns.TypeA)
	if len(r.Answer) != 1 {
		t.Fatalf("A %s: %v", name, r)
	}
	return r.Answer[0].(*dns.A).A.String()
}

func TestTransparentTLS(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.8")}}
	})
	cert := selfSigned(t, "a.test", "b.test", "x.other.test", "bad.a.test")
	tlsAddr := server(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		if tc.Handshake() == nil {
			io.WriteString(tc, "hello over tls\n")
		}
	})
	h.route("11.0.0.8", tlsAddr)
	h.route("10.20.0.5", tlsAddr)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	fake := fakeFor(t, h, "a.test")

	handshake := func(dst, sni string) (string, error) {
		c := h.dialTransparent(dst)
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(tc).ReadString('\n')
	}
	if line, err := handshake(fake+":443", "a.test"); err != nil || line != "hello over tls\n" {
		t.Fatalf("fake address, matching sni: %q %v", line, err)
	}
	if got := h.dials(); len(got) != 1 || got[0].String() != "11.0.0.8:443" {
		t.Fatalf("dialled %v, want the pinned address of a.test", got)
	}
	if _, err := handshake(fake+":443", "b.test"); err == nil {
		t.Fatal("fronting through a.test's fake address with sni b.test succeeded")
	}
	h.ev.waitFor(t, "sni deny", func(e Event) bool {
		return e.Kind == "transparent" && e.Reason == "tls sni b.test does not match admitted host a.test"
	})
	if len(h.dials()) != 1 {
		t.Fatalf("a refused ClientHello was dialled: %v", h.dials())
	}

	// A literal admitted by CIDR: any name but one the policy denies.
	if line, err := handshake("10.20.0.5:443", "x.other.test"); err != nil || line != "hello over tls\n" {
		t.Fatalf("literal in allow_cidrs: %q %v", line, err)
	}
	if _, err := handshake("10.20.0.5:443", "bad.a.test"); err == nil {
		t.Fatal("literal with a denied sni succeeded")
	}
	h.ev.waitFor(t, "denied sni on literal", func(e Event) bool {
		return e.Kind == "transparent" && strings.Contains(e.Reason, "tls sni bad.a.test names a host the policy denies")
	})

	// An address the door never handed out, and a literal outside the CIDRs.
	for _, dst := range []string{"198.19.200.1:443", "11.0.0.8:443"} {
		c := h.dialTransparent(dst)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Fatalf("%s answered %q", dst, b)
		}
	}
	h.ev.waitFor(t, "unknown fake", func(e Event) bool {
		return e.Kind == "transparent" && strings.Contains(e.Reason, "never handed out")
	})
	h.ev.waitFor(t, "literal deny", func(e Event) bool {
		return e.Kind == "transparent" && e.Host == "11.0.0.8" && e.Decision == "deny"
	})

	// Opaque bytes on 443 are refused.
	c := h.dialTransparent(fake + ":443")
	io.WriteString(c, "SSH-2.0-sneaky\r\n")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("opaque on 443 answered %q", b)
	}
	h.ev.waitFor(t, "opaque deny", func(e Event) bool { return strings.Contains(e.Reason, "opaque (non-tls) traffic on port 443") })
}

func TestTransparentHTTP(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"web.test": {netip.MustParseAddr("11.0.0.2")}}
	})
	h.route("11.0.0.2", httpServer(t, "W", nil))
	fake := fakeFor(t, h, "web.test")
	get := func(dst, host string) (*http.Response, string) {
		c := h.dialTransparent(dst)
		io.WriteString(c, "GET /p HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET via %s Host %s: %v", dst, host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := get(fake+":80", "web.test"); resp.StatusCode != 200 || !strings.Contains(body, "hello from W: GET /p HTTP/1.1 host=web.test") {
		t.Fatalf("matching host: %d %q", resp.StatusCode, body)
	}
	resp, body := get(fake+":80", "evil.test")
	if resp.StatusCode != 403 || !strings.Contains(body, "http host evil.test does not match admitted host web.test") || resp.Header.Get("X-Postern-Decision") == "" {
		t.Fatalf("mismatched host: %d %q", resp.StatusCode, body)
	}
	// A name denied outright still gets a readable refusal over plain HTTP.
	resp, body = get("11.0.0.99:80", "11.0.0.99")
	if resp.StatusCode != 403 || !strings.Contains(body, `allow_cidrs = ["11.0.0.99/32"]`) {
		t.Fatalf("literal outside the policy: %d %q", resp.StatusCode, body)
	}
}

func TestTransparentServerSpeaksFirst(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"ssh.test": {netip.MustParseAddr("11.0.0.7")}}
	})
	h.route("11.0.0.7", server(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-test\r\n")
		io.Copy(c, c)
	}))
	fake := fakeFor(t, h, "ssh.test")
	c := h.dialTransparent(fake + ":2222")
	c.SetDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("banner before the client spoke: %q %v", line, err)
	}
	io.WriteString(c, "SSH-2.0-client\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "SSH-2.0-client\r\n" {
		t.Fatalf("echo: %q %v", line, err)
	}
	c.(*net.TCPConn).CloseWrite()
	io.ReadAll(br)
	end := h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.Kind == "transparent" })
	if end.BytesUp != 16 || end.BytesDown != 30 || end.Host != "ssh.test" || end.Addr != "11.0.0.7" {
		t.Fatalf("end %+v", end)
	}
}

func TestTransparentHTTPKeepAliveEachRequestChecked(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"web.test": {netip.MustParseAddr("11.0.0.2")}}
	})
	seen := make(chan string, 8)
	h.route("11.0.0.2", httpServer(t, "W", seen))
	fake := fakeFor(t, h, "web.test")
	c := h.dialTransparent(fake + ":80")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: web.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)
	// The second request on the same connection names another host.
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("second request with another host: %v %v", resp, err)
	}
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want only the first", len(seen))
	}
	h.ev.waitFor(t, "deny", func(e Event) bool {
		return e.Kind == "transparent" && e.Reason == "http host evil.test does not match admitted host web.test"
	})
	end := h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.Kind == "transparent" })
	if end.BytesUp == 0 || end.BytesDown == 0 {
		t.Fatalf("end %+v", end)
	}
}

// On the transparent side's port 80 only an HTTP/1.x request head may pass:
// HTTP/2's prior-knowledge preface, a lowercase method or TLS would otherwise
// be relayed unread, past the per-request checks.
func TestTransparentPort80RefusesWhatIsNotHTTP1(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"web.test": {netip.MustParseAddr("11.0.0.2")}}
	})
	seen := make(chan string, 8)
	h.route("11.0.0.2", server(t, func(c net.Conn) {
		b := make([]byte, 64)
		n, _ := c.Read(b)
		seen <- string(b[:n])
	}))
	fake := fakeFor(t, h, "web.test")
	for name, first := range map[string][]byte{
		"h2c preface":      []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
		"lowercase method": []byte("get / HTTP/1.1\r\nHost: web.test\r\n\r\n"),
		"tls":              clientHelloBytes(t, "web.test"),
		"opaque":           []byte("SSH-2.0-OpenSSH_9.2\r\n"),
	} {
		c := h.dialTransparent(fake + ":80")
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(first)
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("%s on port 80: got %q back, want the connection closed", name, b)
		}
		c.Close()
		h.ev.waitFor(t, name+" refused", func(e Event) bool {
			return e.Kind == "transparent" && e.Decision == "deny" && e.Port == 80 &&
				(strings.Contains(e.Reason, "not an http/1.x request") || strings.Contains(e.Reason, "tls on port 80"))
		})
	}
	select {
	case got := <-seen:
		t.Fatalf("the upstream received %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}
