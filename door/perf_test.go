package door

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
		c.DrainTimeout = 700 * time.Millisecond
	})
	h.route("11.0.0.1", server(t, func(c net.Conn) { io.Copy(c, c) }))
	c, head, _ := connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	start := time.Now()
	h.cancel()
	// New connections are no longer served.
	deadline := time.Now().Add(2 * time.Second)
	for {
		nc, err := net.DialTimeout("tcp", h.proxy, time.Second)
		if err != nil {
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("proxy still accepting after cancel")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The open tunnel keeps working while the drain lasts.
	c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "still here")
	buf := make([]byte, 10)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("tunnel during drain: %q %v", buf, err)
	}
	// Then it is closed, and Run returns.
	if _, err := c.Read(buf); err == nil {
		t.Fatal("tunnel still open after the drain")
	}
	err := <-h.done
	h.done <- err
	took := time.Since(start)
	if err != nil || took < 600*time.Millisecond || took > 3*time.Second {
		t.Fatalf("Run returned %v after %v, want nil after about the 700ms drain", err, took)
	}
	h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.BytesUp == 10 && e.BytesDown == 10 })
}

func TestDrainReturnsEarlyWhenIdle(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) { c.DrainTimeout = 5 * time.Second })
	start := time.Now()
	h.cancel()
	err := <-h.done
	h.done <- err
	if err != nil || time.Since(start) > time.Second {
		t.Fatalf("idle door took %v to stop (%v)", time.Since(start), err)
	}
}

// heapAndStacks is the live heap plus goroutine stacks after a GC.
func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestIdleTunnelMemory measures what an idle, established CONNECT tunnel
// costs the door: the memory of N tunnels minus that of N direct connections
// between the same client and server.
func TestIdleTunnelMemory(t *testing.T) {
	const n = 200
	const budget = 40 << 10
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	srv := server(t, func(c net.Conn) {
		var one [1]byte
		for {
			if _, err := c.Read(one[:]); err != nil {
				return
			}
		}
	})
	h.route("11.0.0.1", srv)

	open := func(viaDoor bool) []net.Conn {
		conns := make([]net.Conn, 0, n)
		for range n {
			var c net.Conn
			if viaDoor {
				var head string
				c, head, _ = connectVia(t, h.proxy, "a.test:443")
				if !strings.HasPrefix(head, "HTTP/1.1 200") {
					t.Fatal(head)
				}
			} else {
				var err error
				if c, err = net.Dial("tcp", srv); err != nil {
					t.Fatal(err)
				}
			}
			io.WriteString(c, "x") // past the first-bytes check: established
			conns = append(conns, c)
		}
		time.Sleep(200 * time.Millisecond)
		return conns
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	base := heapAndStacks()
	direct := open(false)
	withDirect := heapAndStacks()
	closeAll(direct)
	base2 := heapAndStacks()
	tunnels := open(true)
	withTunnels := heapAndStacks()
	closeAll(tunnels)

	directPer := (int64(withDirect) - int64(base)) / n
	tunnelPer := (int64(withTunnels) - int64(base2)) / n
	doorPer := tunnelPer - directPer
	t.Logf("per connection: direct %d B, through the door %d B, the door's share %d B (budget %d B)", directPer, tunnelPer, doorPer, budget)
	if doorPer > budget {
		t.Fatalf("an idle tunnel costs the door %d bytes, over the %d budget", doorPer, budget)
	}
}

func BenchmarkDecide(b *testing.B) {
	d, err := New(Config{Policy: mustPolicy(b, testPolicy), AddHosts: map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	name, lit := hostOf(b, "www.a.test"), hostOf(b, "10.20.1.2")
	d.cfg.AddHosts["www.a.test"] = []netip.Addr{netip.MustParseAddr("11.0.0.2")}
	b.Run("name", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !d.Decide(ctx, name, 443).Allowed() {
				b.Fatal("denied")
			}
		}
	})
	b.Run("literal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !d.Decide(ctx, lit, 443).Allowed() {
				b.Fatal("denied")
			}
		}
	})
	denied := hostOf(b, "bad.a.test")
	b.Run("denied", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d.Decide(ctx, denied, 443).Allowed() {
				b.Fatal("allowed")
			}
		}
	})
}

// BenchmarkTunnelThroughput moves bytes through a CONNECT tunnel over loopback
// (splice between the door's two sockets).
func BenchmarkTunnelThroughput(b *testing.B) {
	h := newHarness(b, mustPolicy(b, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	got := make(chan int64, 1)
	h.route("11.0.0.1", server(b, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}))
	c, head, _ := connectVia(b, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		b.Fatal(head)
	}
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if n := <-got; n != int64(b.N)*int64(len(chunk)) {
		b.Fatalf("server got %d bytes", n)
	}
	b.StopTimer()
}

// BenchmarkConnectLatency measures what the door adds to opening a connection:
// connect, CONNECT/200 and one echoed byte, against the same done directly.
func BenchmarkConnectLatency(b *testing.B) {
	h := newHarness(b, mustPolicy(b, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	echo := server(b, func(c net.Conn) { io.Copy(c, c) })
	h.route("11.0.0.1", echo)
	req := []byte("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n")
	const okLine = "HTTP/1.1 200 Connection established\r\n\r\n"
	round := func(viaDoor bool) time.Duration {
		start := time.Now()
		addr := echo
		if viaDoor {
			addr = h.proxy
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 128)
		if viaDoor {
			c.Write(req)
			buf := make([]byte, len(okLine))
			if _, err := io.ReadFull(br, buf); err != nil || string(buf) != okLine {
				b.Fatalf("CONNECT: %q %v", buf, err)
			}
		}
		c.Write([]byte{'x'})
		if x, err := br.ReadByte(); err != nil || x != 'x' {
			b.Fatalf("echo: %v", err)
		}
		return time.Since(start)
	}
	var direct, door []time.Duration
	for range b.N {
		direct = append(direct, round(false))
		door = append(door, round(true))
	}
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds())
	}
	dp, dd := p50(direct), p50(door)
	b.ReportMetric(dp, "p50-direct-µs")
	b.ReportMetric(dd, "p50-door-µs")
	b.ReportMetric(dd-dp, "p50-added-µs")
}

var _ = fmt.Sprint

// BenchmarkHTTPKeepAlive sends absolute-URI GETs on one kept connection
// through the explicit proxy to an upstream answering 3 bytes, as the
// keep-alive row of the benchmarks does with wrk.
func BenchmarkHTTPKeepAlive(b *testing.B) {
	h := newHarness(b, mustPolicy(b, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", server(b, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
		}
	}))
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := []byte("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
