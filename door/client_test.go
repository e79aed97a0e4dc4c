package door

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clientsAuth is a minimal Authenticate: name -> token and policy, the
// policy read afresh on every request.
type clientsAuth struct {
	mu  sync.Mutex
	by  map[string]*Client
	tok map[string]string
	n   atomic.Int64
}

func (a *clientsAuth) set(name, token string, c *Client) {
	a.mu.Lock()
	a.by[name], a.tok[name] = c, token
	a.mu.Unlock()
}

func (a *clientsAuth) authenticate(r *http.Request) (*Client, error) {
	a.n.Add(1)
	v := r.Header.Get("Proxy-Authorization")
	if v == "" {
		return nil, &AuthError{Reason: "no credentials"}
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "Basic "))
	if err != nil {
		return nil, &AuthError{Reason: "bad credentials"}
	}
	name, token, _ := strings.Cut(string(raw), ":")
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.by[name]
	if !ok || a.tok[name] != token {
		return nil, &AuthError{Client: name, Reason: "wrong token"}
	}
	return c, nil
}

func basic(name, token string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"+token))
}

func TestAuthenticatePerClientPolicyAndAttribution(t *testing.T) {
	checkNoLeaks(t)
	auth := &clientsAuth{by: map[string]*Client{}, tok: map[string]string{}}
	alicePol := mustPolicy(t, `allow = ["a.test"]`)
	auth.set("alice", "ta", &Client{Name: "alice", Policy: alicePol})
	auth.set("bob", "tb", &Client{Name: "bob", Policy: mustPolicy(t, `allow = ["b.test"]`)})
	h := newHarness(t, mustPolicy(t, `allow = ["a.test", "b.test"]`), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}, "b.test": {netip.MustParseAddr("11.0.0.2")}}
		c.Authenticate = auth.authenticate
	})
	h.route("11.0.0.1", httpServer(t, "a", nil))
	h.route("11.0.0.2", httpServer(t, "b", nil))

	connect := func(target, creds string) (int, http.Header, string) {
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		extra := ""
		if creds != "" {
			extra = "Proxy-Authorization: " + creds + "\r\n"
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, extra)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s: %v", target, err)
		}
		var body []byte
		if resp.StatusCode != 200 {
			body, _ = io.ReadAll(resp.Body)
		}
		return resp.StatusCode, resp.Header, string(body)
	}
	code, hdr, body := connect("a.test:443", "")
	if code != 407 || hdr.Get("Proxy-Authenticate") != `Basic realm="postern"` || !strings.Contains(body, "NAME:TOKEN") {
		t.Fatalf("no credentials: %d %v %q", code, hdr, body)
	}
	if code, _, _ := connect("a.test:443", basic("alice", "wrong")); code != 407 {
		t.Fatalf("wrong token: %d", code)
	}
	ev := h.ev.waitFor(t, "refused attempt as alice", func(e Event) bool {
		return e.Event == "decision" && e.Client == "alice" && e.Decision == "deny"
	})
	if !strings.Contains(ev.Reason, "wrong token") || ev.Host != "a.test" || ev.Port != 443 || ev.Kind != "connect" || ev.Peer == "" {
		t.Fatalf("refused attempt recorded as %+v", ev)
	}
	if code, _, _ := connect("a.test:443", basic("alice", "ta")); code != 200 {
		t.Fatalf("alice to a.test: %d", code)
	}
	if code, _, body := connect("b.test:443", basic("alice", "ta")); code != 403 || !strings.Contains(body, "no allow rule") {
		t.Fatalf("alice to b.test: %d %q", code, body)
	}
	if code, _, _ := connect("b.test:443", basic("bob", "tb")); code != 200 {
		t.Fatalf("bob to b.test: %d", code)
	}
	ev = h.ev.waitFor(t, "bob's allow", func(e Event) bool {
		return e.Event == "decision" && e.Client == "bob" && e.Decision == "allow" && e.Host == "b.test"
	})
	if ev.Mode != "enforce" {
		t.Fatalf("bob's decision %+v", ev)
	}
	end := h.ev.waitFor(t, "end of bob's tunnel", func(e Event) bool { return e.Event == "end" && e.Conn == ev.Conn })
	if end.Client != "bob" {
		t.Fatalf("end event %+v lacks the client", end)
	}

	// A kept connection: each request is asked about, a change of policy
	// counts from the next request, and the connection never changes hands.
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(url, creds string) (*http.Response, string) {
		return roundTrip(t, c, br, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", url, strings.TrimPrefix(url, "http://"), creds))
	}
	before := auth.n.Load()
	if resp, body := get("http://a.test", basic("alice", "ta")); resp.StatusCode != 200 || !strings.Contains(body, "hello from a") {
		t.Fatalf("alice GET a.test: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get("http://b.test", basic("alice", "ta")); resp.StatusCode != 403 {
		t.Fatalf("alice GET b.test before the change: %d", resp.StatusCode)
	}
	auth.set("alice", "ta", &Client{Name: "alice", Policy: mustPolicy(t, `allow = ["a.test", "b.test"]`)})
	if resp, body := get("http://b.test", basic("alice", "ta")); resp.StatusCode != 200 || !strings.Contains(body, "hello from b") {
		t.Fatalf("alice GET b.test after the change: %d %q", resp.StatusCode, body)
	}
	if got := auth.n.Load() - before; got != 3 {
		t.Fatalf("asked %d times for 3 requests", got)
	}
	resp, body := get("http://b.test", basic("bob", "tb"))
	if resp.StatusCode != 407 || !strings.Contains(body, `belongs to client "alice"`) || !resp.Close {
		t.Fatalf("bob on alice's connection: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
}

func TestNoAuthenticateAsksNothing(t *testing.T) {
	h := newHarness(t, mustPolicy(t, `allow = ["a.test"]`), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	h.route("11.0.0.1", httpServer(t, "a", nil))
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, _ := roundTrip(t, c, bufio.NewReader(c), "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("plain door: %d", resp.StatusCode)
	}
	ev := h.ev.waitFor(t, "decision", func(e Event) bool { return e.Event == "decision" })
	if ev.Client != "" || ev.Peer == "" || ev.JudgeNS != 0 {
		t.Fatalf("plain door event %+v", ev)
	}
}
