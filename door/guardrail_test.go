package door

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// guardrailPolicy seals model.test behind a guardrail listening at addr.
func guardrailPolicy(t *testing.T, addr string) string {
	return fmt.Sprintf(`mode  = "enforce"
ports = [80, 443]
allow = ["model.test", "a.test"]
guardrail "model" {
  address = %q
  hosts   = ["model.test"]
  env     = ["MODEL_BASE_URL"]
}
`, addr)
}

func TestGuardrailSealAndWay(t *testing.T) {
	checkNoLeaks(t)
	seen := make(chan string, 4)
	gw := httpServer(t, "guardrail", seen)
	gwAP := netip.MustParseAddrPort(gw)
	pol := mustPolicy(t, guardrailPolicy(t, gw))
	h := newHarness(t, pol, func(c *Config) {
		c.Seal = true
		c.AddHosts = map[string][]netip.Addr{"model.test": {netip.MustParseAddr("11.0.0.9")}, "a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("127.0.0.1", gw)
	h.route("11.0.0.5", httpServer(t, "A", nil))

	// The sealed host is refused, with the guardrail named.
	c, head, body := connectVia(t, h.proxy, "model.test:443")
	c.Close()
	if !strings.HasPrefix(head, "HTTP/1.1 403") || !strings.Contains(body, "model.test is sealed: reach it through guardrail model at $MODEL_BASE_URL") {
		t.Fatalf("CONNECT to the sealed host: %q %q", head, body)
	}
	// Other allowed hosts still work.
	c, head, _ = connectVia(t, h.proxy, "a.test:80")
	c.Close()
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("CONNECT to an allowed host: %q", head)
	}
	// The run's way to the guardrail: its address, on the transparent side
	// and as an absolute URI, reaches the guardrail's loopback address.
	url := pol.Guardrails[0].URL(0)
	way := netip.MustParseAddrPort(strings.TrimPrefix(url, "http://"))
	tc := h.dialTransparent(way.String())
	io.WriteString(tc, "GET /v1/messages HTTP/1.1\r\nHost: "+way.String()+"\r\n\r\n")
	resp, rbody := readResp(t, tc)
	if resp != 200 || !strings.Contains(rbody, "hello from guardrail: GET /v1/messages") {
		t.Fatalf("transparent to the guardrail: %d %q", resp, rbody)
	}
	<-seen
	pc := newProxyClient(t, h.proxy)
	if code, b := pc.send("GET " + url + "/v1/x HTTP/1.1\r\nHost: " + way.String() + "\r\n\r\n"); code != 200 || !strings.Contains(b, "hello from guardrail") {
		t.Fatalf("absolute URI to the guardrail: %d %q", code, b)
	}
	<-seen
	// Only the guardrail's port leads there, and loopback stays shut otherwise.
	bad := h.dialTransparent(netip.AddrPortFrom(way.Addr(), gwAP.Port()+1).String())
	io.WriteString(bad, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := readResp(t, bad); code == 200 {
		t.Fatal("another port of the guardrail's address went through")
	}
	if code, _ := pc.send("GET http://127.0.0.1:" + fmt.Sprint(gwAP.Port()) + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); code != 403 {
		t.Fatalf("loopback by its own address: %d", code)
	}
	h.ev.waitFor(t, "the seal's denial", func(e Event) bool {
		return e.Decision == "deny" && e.Host == "model.test" && strings.Contains(e.Reason, "sealed")
	})
}

// Without the seal held, the sealed hosts are judged by the policy as written,
// and the way to the guardrail still works.
func TestGuardrailNotSealed(t *testing.T) {
	checkNoLeaks(t)
	gw := httpServer(t, "guardrail", nil)
	pol := mustPolicy(t, guardrailPolicy(t, gw))
	h := newHarness(t, pol, func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"model.test": {netip.MustParseAddr("11.0.0.9")}}
	})
	h.route("127.0.0.1", gw)
	h.route("11.0.0.9", httpServer(t, "M", nil))
	c, head, _ := connectVia(t, h.proxy, "model.test:80")
	c.Close()
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("unsealed: %q", head)
	}
	pc := newProxyClient(t, h.proxy)
	url := pol.Guardrails[0].URL(0)
	if code, _ := pc.send("GET " + url + "/ HTTP/1.1\r\nHost: " + strings.TrimPrefix(url, "http://") + "\r\n\r\n"); code != 200 {
		t.Fatalf("the way to the guardrail, unsealed: %d", code)
	}
}

// readResp reads one response from c; 0 when none came.
func readResp(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
