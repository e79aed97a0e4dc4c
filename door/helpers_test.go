package door

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/policy"
)

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.hcl", []byte(src))
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	return p
}

// events collects what a door emits.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) emit(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.evs)
}

// waitFor waits until an event matching f was emitted and returns it.
func (e *events) waitFor(t testing.TB, what string, f func(Event) bool) Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, ev := range e.all() {
			if f(ev) {
				return ev
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %s event; got %+v", what, e.all())
	return Event{}
}

// harness is a door whose upstream dials are routed to loopback servers: the
// door judges and picks the address as it would for real, and the dial seam
// connects that judged address to a test server instead. Loopback itself is on
// the hard floor, so it can never be judged into.
type harness struct {
	t      testing.TB
	d      *Door
	ev     *events
	proxy  string // explicit proxy address
	trans  string // transparent listener address
	dnsUDP string
	dnsTCP string

	mu       sync.Mutex
	routes   map[netip.Addr]string // judged address -> loopback server host:port
	dialled  []netip.AddrPort
	lookedUp []string
	lookups  map[string][]netip.Addr
	origDst  map[string]netip.AddrPort // client addr -> original destination

	cancel context.CancelFunc
	done   chan error
}

type harnessOpt func(*Config)

func newHarness(t testing.TB, pol *policy.Policy, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, ev: &events{}, routes: map[netip.Addr]string{}, lookups: map[string][]netip.Addr{}, origDst: map[string]netip.AddrPort{}}
	cfg := Config{Policy: pol, Emit: h.ev.emit, DrainTimeout: time.Second, DialTimeout: 2 * time.Second, Run: "test-run"}
	for _, o := range opts {
		o(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Resolver == "" {
		d.lookup = func(ctx context.Context, name string) ([]netip.Addr, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.lookedUp = append(h.lookedUp, name)
			if a, ok := h.lookups[name]; ok {
				return a, nil
			}
			return nil, errNoSuchHost
		}
	}
	d.dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		h.mu.Lock()
		h.dialled = append(h.dialled, ap)
		target, ok := h.routes[ap.Addr()]
		h.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("test: no route for %s", ap)
		}
		var nd net.Dialer
		return nd.DialContext(ctx, "tcp", target)
	}
	d.origDst = func(c net.Conn) (netip.AddrPort, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		ap, ok := h.origDst[c.RemoteAddr().String()]
		if !ok {
			return netip.AddrPort{}, ErrNoOriginalDst
		}
		return ap, nil
	}
	h.d = d
	pl := listen(t)
	tl := listen(t)
	ul, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := listen(t)
	h.proxy, h.trans, h.dnsUDP, h.dnsTCP = pl.Addr().String(), tl.Addr().String(), ul.LocalAddr().String(), dl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- d.Run(ctx, Listeners{Proxy: pl, Transparent: tl, DNSUDP: ul, DNSTCP: dl}) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("door run: %v", err)
		}
		h.done <- err
	case <-time.After(10 * time.Second):
		h.t.Errorf("door did not stop within 10s")
	}
}

// route sends dials of the judged address a to the loopback server at target.
func (h *harness) route(a string, target string) {
	h.mu.Lock()
	h.routes[netip.MustParseAddr(a)] = target
	h.mu.Unlock()
}

func (h *harness) lookupResult(name string, addrs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		h.lookups[name] = append(h.lookups[name], netip.MustParseAddr(a))
	}
}

func (h *harness) dials() []netip.AddrPort {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.dialled)
}

func (h *harness) looked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lookedUp)
}

// dialTransparent opens a connection to the transparent listener as if the
// wall had redirected a connection addressed to dst.
func (h *harness) dialTransparent(dst string) net.Conn {
	h.t.Helper()
	ap := netip.MustParseAddrPort(dst)
	var nd net.Dialer
	// Bind first so the original destination is known before the door accepts.
	la, err := net.ResolveTCPAddr("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	l, err := net.ListenTCP("tcp", la) // reserve a free port
	if err != nil {
		h.t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	nd.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	h.mu.Lock()
	h.origDst[nd.LocalAddr.String()] = ap
	h.mu.Unlock()
	c, err := nd.Dial("tcp", h.trans)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// server runs handle for every connection to a loopback listener until the
// test ends.
func server(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	return serveOn(t, listen(t), handle)
}

// serveOn runs handle for every connection to l until the test ends.
func serveOn(t testing.TB, l net.Listener, handle func(net.Conn)) string {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// httpServer answers every request with "hello from NAME: <method> <uri> host=<host>".
func httpServer(t testing.TB, name string, seen chan<- string) string {
	return server(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			var lines []string
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					break
				}
				lines = append(lines, line)
			}
			if seen != nil {
				seen <- strings.Join(lines, "\n")
			}
			host := ""
			var reqBody io.Reader = strings.NewReader("")
			chunked := false
			for _, l := range lines[1:] {
				k, v, ok := strings.Cut(l, ":")
				v = strings.TrimSpace(v)
				switch {
				case !ok:
				case strings.EqualFold(k, "host"):
					host = v
				case strings.EqualFold(k, "content-length"):
					n, _ := strconv.ParseInt(v, 10, 64)
					reqBody = io.LimitReader(br, n)
				case strings.EqualFold(k, "transfer-encoding") && strings.EqualFold(v, "chunked"):
					reqBody, chunked = httputil.NewChunkedReader(br), true
				}
			}
			if _, err := io.Copy(io.Discard, reqBody); err != nil {
				return
			}
			for chunked { // the trailer section after the last chunk
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				chunked = strings.TrimRight(l, "\r\n") != ""
			}
			body := fmt.Sprintf("hello from %s: %s host=%s\n", name, lines[0], host)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s", len(body), body)
		}
	})
}

// roundTrip writes the request req on c and reads the response from br (a
// reader of c), with its whole body.
func roundTrip(t testing.TB, c net.Conn, br *bufio.Reader, req string) (*http.Response, string) {
	t.Helper()
	io.WriteString(c, req)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// connectVia opens a CONNECT tunnel through the proxy and returns the
// connection and the proxy's response head and body (body only on refusal).
func connectVia(t testing.TB, proxy, target string) (net.Conn, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var head strings.Builder
	var one [1]byte
	for !strings.HasSuffix(head.String(), "\r\n\r\n") {
		if _, err := c.Read(one[:]); err != nil {
			t.Fatalf("read CONNECT response: %v (so far %q)", err, head.String())
		}
		head.WriteByte(one[0])
	}
	body := ""
	if !strings.HasPrefix(head.String(), "HTTP/1.1 200") {
		b, _ := io.ReadAll(c)
		body = string(b)
	}
	c.SetReadDeadline(time.Time{})
	return c, head.String(), body
}

// checkNoLeaks fails if goroutines started during the test are still running
// once it has stopped everything.
func checkNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

var errTest = errors.New("test")

func hostOf(t testing.TB, s string) policy.Host {
	t.Helper()
	h, err := policy.CanonicalHost(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
