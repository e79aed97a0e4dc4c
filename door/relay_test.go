package door

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// TestIdleTunnelDescriptors holds N established CONNECT tunnels, each of which
// has moved bytes both ways, and counts the descriptors the door keeps for
// them: its two sockets per tunnel, plus at most the pipes it keeps for reuse.
func TestIdleTunnelDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	const n = 300
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	// An echo that holds no pipe of its own (io.Copy between sockets would),
	// so the descriptors counted are the sockets and the door's.
	echo := server(t, func(c net.Conn) {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
	h.route("11.0.0.1", echo)

	prove := func(c net.Conn) {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo through the tunnel: %q %v", buf, err)
		}
		c.SetDeadline(time.Time{})
	}
	settle := func() { time.Sleep(200 * time.Millisecond) }

	// The same client and server ends without the door, as the baseline.
	settle()
	base := openFDs(t)
	direct := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", echo)
		if err != nil {
			t.Fatal(err)
		}
		prove(c)
		direct = append(direct, c)
	}
	settle()
	directPer := float64(openFDs(t)-base) / n
	for _, c := range direct {
		c.Close()
	}
	settle()

	base = openFDs(t)
	tunnels := make([]net.Conn, 0, n)
	for range n {
		c, head, _ := connectVia(t, h.proxy, "a.test:443")
		if !strings.HasPrefix(head, "HTTP/1.1 200") {
			t.Fatal(head)
		}
		prove(c)
		prove(c) // past the first-bytes check, both directions idle again
		tunnels = append(tunnels, c)
	}
	settle()
	grown := openFDs(t) - base
	doorShare := grown - int(directPer*n+0.5)
	slack := 2*maxFreePipes + 8
	t.Logf("%d idle tunnels: %d descriptors more (direct %.1f per connection), the door's share %d = %.2f per tunnel (budget 2 per tunnel + %d)",
		n, grown, directPer, doorShare, float64(doorShare)/n, slack)
	if doorShare > 2*n+slack {
		logFDKinds(t)
		t.Fatalf("the door holds %d descriptors for %d idle tunnels, want at most %d", doorShare, n, 2*n+slack)
	}
	for _, c := range tunnels {
		c.Close()
	}
}

// TestRelayBulk moves distinct payloads both ways at once through a tunnel
// and checks every byte and the byte counts in the end event.
func TestRelayBulk(t *testing.T) {
	checkNoLeaks(t)
	const size = 8 << 20
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	up := make([]byte, size)
	down := make([]byte, size)
	for i := range up {
		up[i] = byte(rng.Uint32())
		down[i] = byte(rng.Uint32())
	}
	gotUp := make(chan [32]byte, 1)
	h.route("11.0.0.1", server(t, func(c net.Conn) {
		var wg sync.WaitGroup
		wg.Go(func() {
			c.Write(down)
			c.(*net.TCPConn).CloseWrite()
		})
		hs := sha256.New()
		io.Copy(hs, c)
		wg.Wait()
		var sum [32]byte
		copy(sum[:], hs.Sum(nil))
		gotUp <- sum
	}))
	c, head, _ := connectVia(t, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatal(head)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var wg sync.WaitGroup
	wg.Go(func() {
		c.Write(up)
		c.(*net.TCPConn).CloseWrite()
	})
	got, err := io.ReadAll(c)
	wg.Wait()
	if err != nil || !bytes.Equal(got, down) {
		t.Fatalf("downstream: %d of %d bytes, equal %v, err %v", len(got), size, bytes.Equal(got, down), err)
	}
	if <-gotUp != sha256.Sum256(up) {
		t.Fatal("upstream bytes differ")
	}
	h.ev.waitFor(t, "end", func(e Event) bool { return e.Event == "end" && e.BytesUp == size && e.BytesDown == size })
}

// TestRelayBuffered covers the copy used where splice cannot be: a
// non-TCP connection. Bytes, counts and the half-close must be the same.
func TestRelayBuffered(t *testing.T) {
	dir := t.TempDir()
	pair := func(name string) (net.Conn, net.Conn) {
		l, err := net.Listen("unix", dir+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		a, err := net.Dial("unix", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	srcW, src := pair("src")
	dst, dstR := pair("dst")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 50000) // 800 kB
	go func() {
		srcW.Write(payload)
		srcW.(*net.UnixConn).CloseWrite()
	}()
	done := make(chan int64, 1)
	go func() { done <- pump(dst, src) }()
	dstR.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(dstR) // ends only if pump half-closed dst
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("got %d of %d bytes, err %v", len(got), len(payload), err)
	}
	if n := <-done; n != int64(len(payload)) {
		t.Fatalf("pump reported %d bytes, want %d", n, len(payload))
	}
}

// BenchmarkTunnelDownload moves bytes from the upstream to the client, the
// direction a download takes.
func BenchmarkTunnelDownload(b *testing.B) {
	h := newHarness(b, mustPolicy(b, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.1")}}
	})
	chunk := make([]byte, 1<<20)
	h.route("11.0.0.1", server(b, func(c net.Conn) {
		var one [1]byte
		c.Read(one[:])
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}))
	c, head, _ := connectVia(b, h.proxy, "a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 200") {
		b.Fatal(head)
	}
	c.Write([]byte{'x'})
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		for range 4 {
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	c.Close()
}

// logFDKinds says what the open descriptors are (sockets, pipes, ...).
func logFDKinds(t testing.TB) {
	ents, _ := os.ReadDir("/proc/self/fd")
	kinds := map[string]int{}
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		k, _, _ := strings.Cut(l, ":")
		kinds[k]++
	}
	t.Logf("fds: %v", kinds)
}
