package door

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDialTimeout(t *testing.T) {
	checkNoLeaks(t)
	ev := &events{}
	d, err := New(Config{Policy: mustPolicy(t, testPolicy), Emit: ev.emit, DialTimeout: 300 * time.Millisecond,
		AddHosts: map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	// An upstream that never answers: the dial waits until it is given up.
	d.dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
	}
	l := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, Listeners{Proxy: l}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("door run: %v", err)
		}
	}()
	start := time.Now()
	_, head, body := connectVia(t, l.Addr().String(), "a.test:443")
	took := time.Since(start)
	if !strings.HasPrefix(head, "HTTP/1.1 502") || !strings.Contains(body, "no connection within 300ms") {
		t.Fatalf("CONNECT to an upstream that never answers: %q %q", head, body)
	}
	if took < 250*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up after %v, want about the 300ms dial timeout", took)
	}
	ev.waitFor(t, "end", func(e Event) bool {
		return e.Event == "end" && strings.Contains(e.Reason, "dial failed") && strings.Contains(e.Reason, "no connection within 300ms")
	})
}

func TestConnectClientLeavesBeforeSpeaking(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	sawEOF := make(chan error, 1)
	h.route("11.0.0.1", server(t, func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var one [1]byte
		_, err := c.Read(one[:])
		sawEOF <- err
	}))
	c, head, _ := connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	c.(*net.TCPConn).CloseWrite()
	if err := <-sawEOF; err != io.EOF {
		t.Fatalf("upstream read %v, want the client's EOF passed on", err)
	}
	h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.BytesUp == 0 })
}
