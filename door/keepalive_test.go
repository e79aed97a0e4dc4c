package door

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// idleClosingServer answers every request with "n=<connection number>" and
// closes a connection that stays idle for idle after a response, without
// saying so (as servers do when their keep-alive timeout runs out).
func idleClosingServer(t *testing.T, idle time.Duration, conns *atomic.Int32) string {
	return server(t, func(c net.Conn) {
		n := conns.Add(1)
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			body := fmt.Sprintf("n=%d %s", n, req.URL.Path)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			c.SetReadDeadline(time.Now().Add(idle))
		}
	})
}

// proxyClient sends raw requests on one keep-alive connection to the proxy.
type proxyClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func newProxyClient(t *testing.T, proxy string) *proxyClient {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &proxyClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (p *proxyClient) send(req string) (int, string) {
	p.t.Helper()
	io.WriteString(p.c, req)
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		p.t.Fatalf("read response to %q: %v", req, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		p.t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b)
}

func TestHTTPKeptUpstreamReusedAndReplacedWhenServerClosedIt(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	var conns atomic.Int32
	h.route("11.0.0.5", idleClosingServer(t, 100*time.Millisecond, &conns))
	pc := newProxyClient(t, h.proxy)

	// Back to back: one upstream connection carries them all.
	for i := range 3 {
		code, body := pc.send(fmt.Sprintf("GET http://a.test/q%d HTTP/1.1\r\nHost: a.test\r\n\r\n", i))
		if code != 200 || body != fmt.Sprintf("n=1 /q%d", i) {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// The server drops the idle connection; a GET goes out again on a new one.
	time.Sleep(300 * time.Millisecond)
	code, body := pc.send("GET http://a.test/after HTTP/1.1\r\nHost: a.test\r\n\r\n")
	if code != 200 || body != "n=2 /after" {
		t.Fatalf("GET after the server closed the kept connection: %d %q", code, body)
	}
	// A POST after the server dropped the idle connection goes out once, on
	// a new connection: the door saw the close while the connection was idle.
	time.Sleep(300 * time.Millisecond)
	code, body = pc.send("POST http://a.test/post HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\n\r\nx")
	if code != 200 || body != "n=3 /post" {
		t.Fatalf("POST after the server closed the kept connection: %d %q", code, body)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("server saw %d connections, want 3", n)
	}
	var allowed int
	for _, ev := range h.ev.all() {
		if ev.Event == "decision" && ev.Decision == "allow" {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allow decisions, want one per request (5)", allowed)
	}
}

func TestHTTPStreamedResponseIsNotHeldBack(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	next := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(next) }) }
	defer release() // before the server's cleanup waits for its handler
	h.route("11.0.0.5", server(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		io.WriteString(c, "a\r\ndata: one\n\r\n")
		<-next // the rest comes only once the client has the first event
		io.WriteString(c, "a\r\ndata: two\n\r\n0\r\n\r\n")
	}))
	pc := newProxyClient(t, h.proxy)
	io.WriteString(pc.c, "GET http://a.test/events HTTP/1.1\r\nHost: a.test\r\n\r\n")
	pc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(resp.Body, buf, len("data: one\n"))
	if err != nil || string(buf[:n]) != "data: one\n" {
		t.Fatalf("first event: %q %v (was it held back?)", buf[:n], err)
	}
	release()
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "data: two\n" {
		t.Fatalf("second event: %q %v", rest, err)
	}
}

func TestDrainClosesIdleKeepAliveConnection(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
		c.DrainTimeout = 3 * time.Second
	})
	var conns atomic.Int32
	h.route("11.0.0.5", idleClosingServer(t, time.Minute, &conns))
	pc := newProxyClient(t, h.proxy)
	if code, _ := pc.send("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	time.Sleep(50 * time.Millisecond) // the door is now waiting for the next head
	start := time.Now()
	h.cancel()
	err := <-h.done
	h.done <- err
	if took := time.Since(start); err != nil || took > time.Second {
		t.Fatalf("Run returned %v after %v; an idle keep-alive connection must not hold the drain", err, took)
	}
	pc.c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := pc.br.ReadByte(); err != io.EOF {
		t.Fatalf("idle client connection after the drain: %v, want EOF", err)
	}
}
