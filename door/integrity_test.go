package door

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The door's plain-HTTP path once corrupted most response bodies while every
// test passed: Go's servers write a response in one piece, and the tests
// checked status codes. These tests' upstream writes each response the way a
// stranger's server may: its head and body split at arbitrary points into
// separate writes with pauses between them, framed by Content-Length, by
// chunks of odd sizes with extensions and trailers, or by closing the
// connection. The client compares the bytes it receives with the bytes the
// server meant.

// framing is how a test response delimits its body.
type framing int

const (
	framedCL      framing = iota // Content-Length
	framedChunked                // Transfer-Encoding: chunked, odd chunks, a trailer
	framedClose                  // HTTP/1.0 style: the body ends when the server closes
)

func (f framing) String() string {
	return [...]string{"content-length", "chunked", "close"}[f]
}

// testBody is n deterministic bytes for seed.
func testBody(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// responseBytes is a whole response carrying body, framed by f. rnd picks
// chunk sizes.
func responseBytes(f framing, body []byte, rnd *rand.Rand) []byte {
	var b bytes.Buffer
	switch f {
	case framedCL:
		fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\nX-Test: cl\r\n\r\n", len(body))
		b.Write(body)
	case framedChunked:
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n")
		rest := body
		for len(rest) > 0 {
			n := 1 + rnd.IntN(min(len(rest), 9000))
			if rnd.IntN(3) == 0 {
				fmt.Fprintf(&b, "%x;ext=%d\r\n", n, n)
			} else {
				fmt.Fprintf(&b, "%X\r\n", n)
			}
			b.Write(rest[:n])
			b.WriteString("\r\n")
			rest = rest[n:]
		}
		sum := sha256.Sum256(body)
		fmt.Fprintf(&b, "0\r\nX-Sum: %s\r\n\r\n", hex.EncodeToString(sum[:8]))
	case framedClose:
		b.WriteString("HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
		b.Write(body)
	}
	return b.Bytes()
}

// splitWrites writes p to c in pieces of random sizes (one byte included),
// pausing now and then, as a server that trickles does.
func splitWrites(c net.Conn, p []byte, rnd *rand.Rand) error {
	for len(p) > 0 {
		var n int
		switch rnd.IntN(4) {
		case 0:
			n = 1
		case 1:
			n = 1 + rnd.IntN(16)
		default:
			n = 1 + rnd.IntN(20000)
		}
		n = min(n, len(p))
		if _, err := c.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if rnd.IntN(8) == 0 {
			time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
		}
	}
	return nil
}

// hostileServer answers each request on a connection with the body its path
// names (/<size>/<framing>/<seed>), written in split pieces, then closes
// (framedClose) or reads the next request.
func hostileServer(t testing.TB) string {
	return server(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			var size, seed int
			var f framing
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			if len(parts) == 3 {
				size, _ = strconv.Atoi(parts[0])
				fi, _ := strconv.Atoi(parts[1])
				f = framing(fi)
				seed, _ = strconv.Atoi(parts[2])
			}
			rnd := rand.New(rand.NewPCG(uint64(seed), uint64(size)))
			resp := responseBytes(f, testBody(size, uint64(seed)), rnd)
			if req.Method == http.MethodHead {
				resp, _, _ = bytes.Cut(resp, []byte("\r\n\r\n"))
				resp = append(resp, "\r\n\r\n"...)
			}
			if err := splitWrites(c, resp, rnd); err != nil || f == framedClose {
				return
			}
		}
	})
}

var integritySizes = []int{0, 1, 13, 16<<10 - 1, 16 << 10, 16<<10 + 1, 1 << 20}

// integrityPath is one way a client reaches the upstream through the door.
type integrityPath struct {
	name string
	// open returns a connection on which origin or absolute requests for the
	// upstream are written, and the request target for a path.
	open func(t *testing.T, h *harness) (net.Conn, func(path string) string)
}

var integrityPaths = []integrityPath{
	{"explicit", func(t *testing.T, h *harness) (net.Conn, func(string) string) {
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			t.Fatal(err)
		}
		return c, func(p string) string { return "http://a.test" + p }
	}},
	{"connect", func(t *testing.T, h *harness) (net.Conn, func(string) string) {
		c, head, _ := connectVia(t, h.proxy, "a.test:80")
		if !strings.HasPrefix(head, "HTTP/1.1 200") {
			t.Fatalf("CONNECT: %q", head)
		}
		return c, func(p string) string { return p }
	}},
	{"transparent", func(t *testing.T, h *harness) (net.Conn, func(string) string) {
		fake := fakeFor(t, h, "a.test")
		return h.dialTransparent(fake + ":80"), func(p string) string { return p }
	}},
}

func TestHTTPBodiesArriveAsTheServerSentThem(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", hostileServer(t))
	for _, p := range integrityPaths {
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			t.Run(p.name+"/"+proto, func(t *testing.T) {
				var c net.Conn
				var target func(string) string
				var br *bufio.Reader
				reopen := func() {
					if c != nil {
						c.Close()
					}
					c, target = p.open(t, h)
					br = bufio.NewReader(c)
				}
				reopen()
				defer func() { c.Close() }()
				seed := 1
				for _, size := range integritySizes {
					for _, f := range []framing{framedCL, framedChunked, framedClose} {
						seed++
						path := fmt.Sprintf("/%d/%d/%d", size, f, seed)
						keep := "Connection: keep-alive\r\n"
						if proto == "HTTP/1.1" {
							keep = ""
						}
						fmt.Fprintf(c, "GET %s %s\r\nHost: a.test\r\n%s\r\n", target(path), proto, keep)
						c.SetReadDeadline(time.Now().Add(10 * time.Second))
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Fatalf("%s %s: read response: %v", proto, path, err)
						}
						got, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil {
							t.Fatalf("%s size %d %s: read body: %v", proto, size, f, err)
						}
						want := testBody(size, uint64(seed))
						if resp.StatusCode != 200 || !bytes.Equal(got, want) {
							t.Fatalf("%s size %d %s: status %d, body %d bytes (sha256 %x), want %d bytes (sha256 %x); first bytes %q",
								proto, size, f, resp.StatusCode, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want), got[:min(len(got), 24)])
						}
						if proto == "HTTP/1.0" && len(resp.TransferEncoding) > 0 {
							t.Fatalf("HTTP/1.0 client got Transfer-Encoding %v", resp.TransferEncoding)
						}
						if f == framedChunked && proto == "HTTP/1.1" && resp.Trailer.Get("X-Sum") == "" {
							t.Errorf("size %d: the trailer did not arrive: %v", size, resp.Trailer)
						}
						if resp.Close {
							reopen()
						}
					}
				}
			})
		}
	}
}

// A HEAD answer carries the length a GET would have, and no body: the next
// response on the connection must not be read as its body.
func TestHTTPHeadAndNoBodyResponsesKeepFraming(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", server(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			switch req.URL.Path {
			case "/head":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
			case "/304":
				io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
			case "/204":
				io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			default:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nafter")
			}
		}
	}))
	pc := newProxyClient(t, h.proxy)
	io.WriteString(pc.c, "HEAD http://a.test/head HTTP/1.1\r\nHost: a.test\r\n\r\n")
	pc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(pc.br, &http.Request{Method: "HEAD"})
	if err != nil || resp.ContentLength != 1234 {
		t.Fatalf("HEAD: %v %+v", err, resp)
	}
	for _, path := range []string{"/304", "/204"} {
		code, body := pc.send("GET http://a.test" + path + " HTTP/1.1\r\nHost: a.test\r\n\r\n")
		if code/100 == 2 && code != 204 || body != "" {
			t.Fatalf("%s: %d %q", path, code, body)
		}
	}
	if code, body := pc.send("GET http://a.test/next HTTP/1.1\r\nHost: a.test\r\n\r\n"); code != 200 || body != "after" {
		t.Fatalf("the response after HEAD, 304 and 204: %d %q", code, body)
	}
}

// RFC 9112 5.1: whitespace between a field name and its colon is refused with
// a 400, so that what follows cannot be read as another request. 6.3: a
// request with both Content-Length and Transfer-Encoding is answered, and the
// connection then closes.
func TestHTTPRequestSmugglingRules(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	seen := make(chan string, 8)
	h.route("11.0.0.5", httpServer(t, "A", seen))

	pc := newProxyClient(t, h.proxy)
	io.WriteString(pc.c, "POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nContent-Length : 34\r\n\r\nGET http://a.test/y HTTP/1.1\r\n\r\n")
	pc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("space before the colon: %v %+v", err, resp)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := pc.br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after a malformed head")
	}
	select {
	case got := <-seen:
		t.Fatalf("the upstream saw a request from a malformed head:\n%s", got)
	default:
	}

	pc = newProxyClient(t, h.proxy)
	io.WriteString(pc.c, "POST http://a.test/te HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET http://a.test/smuggled HTTP/1.1\r\nHost: a.test\r\n\r\n")
	pc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(pc.br, nil)
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("CL and TE: %v %+v (want 200 and Connection: close)", err, resp)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := pc.br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after a request with both Content-Length and Transfer-Encoding")
	}
	if got := <-seen; !strings.Contains(got, "POST /te") {
		t.Fatalf("upstream saw %q", got)
	}
	select {
	case got := <-seen:
		t.Fatalf("the bytes after a CL+TE request were served as a request:\n%s", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// Absolute-form fronting: on a connection admitted for one host, a request
// whose URI names another host is refused, whatever its Host header says; the
// upstream never sees it.
func TestPinnedConnectionRefusesAbsoluteFormForAnotherHost(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	seen := make(chan string, 16)
	h.route("11.0.0.5", httpServer(t, "A", seen))
	for _, p := range integrityPaths[1:] {
		for _, target := range []string{"http://forbidden.test/x", "http://11.0.0.9/x", "http://10.20.0.1/x", "https://a.test/x"} {
			t.Run(p.name+"/"+target, func(t *testing.T) {
				c, _ := p.open(t, h)
				defer c.Close()
				br := bufio.NewReader(c)
				resp, body := roundTrip(t, c, br, "GET /ok HTTP/1.1\r\nHost: a.test\r\n\r\n")
				if resp.StatusCode != 200 {
					t.Fatalf("first request: %d %q", resp.StatusCode, body)
				}
				if got := <-seen; !strings.Contains(got, "GET /ok") {
					t.Fatalf("upstream saw %q", got)
				}
				resp, body = roundTrip(t, c, br, "GET "+target+" HTTP/1.1\r\nHost: a.test\r\n\r\n")
				if resp.StatusCode != 403 {
					t.Fatalf("%s on a connection admitted for a.test: %d %q", target, resp.StatusCode, body)
				}
				select {
				case got := <-seen:
					t.Fatalf("the upstream saw a request for %s:\n%s", target, got)
				case <-time.After(50 * time.Millisecond):
				}
			})
		}
	}
	// The same target with the right host goes through, and the Host sent is
	// the URI's.
	c, _ := integrityPaths[1].open(t, h)
	defer c.Close()
	resp, body := roundTrip(t, c, bufio.NewReader(c), "GET http://a.test/abs HTTP/1.1\r\nHost: a.test\r\n\r\n")
	if resp.StatusCode != 200 || !strings.Contains(body, "GET /abs HTTP/1.1 host=a.test") {
		t.Fatalf("absolute form for the admitted host: %d %q", resp.StatusCode, body)
	}
}

// 1xx responses: 103 reaches an HTTP/1.1 client before the final response,
// never an HTTP/1.0 one; 100-continue lets a client send its body once the
// server asks for it.
func TestHTTPInterimResponses(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", server(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("Expect") == "100-continue" {
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
			} else {
				io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
			}
			b, _ := io.ReadAll(req.Body)
			sum := sha256.Sum256(b)
			out := hex.EncodeToString(sum[:])
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
		}
	}))
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET http://a.test/hints HTTP/1.1\r\nHost: a.test\r\n\r\n")
	line, _ := br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 103") {
		t.Fatalf("first line %q, want the 103", line)
	}
	tp, _ := br.ReadString('\n')
	for tp != "\r\n" && tp != "" {
		tp, _ = br.ReadString('\n')
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("final response after the 103: %v %+v", err, resp)
	}
	io.Copy(io.Discard, resp.Body)

	body := testBody(300<<10, 7)
	fmt.Fprintf(c, "PUT http://a.test/up HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
	line, _ = br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("first line %q, want 100 Continue", line)
	}
	br.ReadString('\n')
	c.Write(body)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after 100-continue: %v %+v", err, resp)
	}
	got, _ := io.ReadAll(resp.Body)
	sum := sha256.Sum256(body)
	if string(got) != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload arrived as %s, want %x", got, sum)
	}

	c10, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c10.Close()
	c10.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c10, "GET http://a.test/hints HTTP/1.0\r\nHost: a.test\r\n\r\n")
	all, _ := io.ReadAll(c10)
	if bytes.Contains(all, []byte(" 103 ")) || !bytes.HasPrefix(all, []byte("HTTP/1.1 200")) {
		t.Fatalf("an HTTP/1.0 client got: %q", all)
	}
}

// A Content-Length the server does not meet must reach the client short, not
// completed or padded, so the client can tell.
func TestHTTPTruncatedBodyStaysTruncated(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", server(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly forty bytes of the hundred promised")
	}))
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET http://a.test/ %s\r\nHost: a.test\r\n\r\n", proto)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		c.Close()
		if err == nil || len(got) >= 100 {
			t.Fatalf("%s: a truncated body arrived as %d bytes with error %v", proto, len(got), err)
		}
	}
}

// Go's own client through the explicit proxy, the way agents' tools use it.
func TestHTTPGoClientThroughProxy(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	h.route("11.0.0.5", hostileServer(t))
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: h.proxy}), DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for i, size := range []int{0, 13, 70000, 1 << 20} {
		for _, f := range []framing{framedCL, framedChunked, framedClose} {
			seed := 100 + i*3 + int(f)
			resp, err := cl.Get(fmt.Sprintf("http://a.test/%d/%d/%d", size, f, seed))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, testBody(size, uint64(seed))) {
				t.Fatalf("size %d %s: %v, %d bytes", size, f, err, len(got))
			}
		}
	}
}

// fuzzUpstream serves, for each request, the response registered under its
// path, written in the registered pieces.
type fuzzUpstream struct {
	mu   sync.Mutex
	next int
	resp map[string]fuzzResponse
}

type fuzzResponse struct {
	raw    []byte
	splits []int // write boundaries in raw
	pause  bool
}

func (u *fuzzUpstream) add(r fuzzResponse) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.next++
	p := fmt.Sprintf("/r%d", u.next)
	u.resp[p] = r
	return p
}

func (u *fuzzUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.mu.Lock()
		r, ok := u.resp[req.URL.Path]
		delete(u.resp, req.URL.Path)
		u.mu.Unlock()
		if !ok {
			return
		}
		prev := 0
		for _, s := range append(r.splits, len(r.raw)) {
			if s <= prev || s > len(r.raw) {
				continue
			}
			if _, err := c.Write(r.raw[prev:s]); err != nil {
				return
			}
			if r.pause {
				time.Sleep(200 * time.Microsecond)
			}
			prev = s
		}
		// One response per connection: the end of a close-delimited body.
		return
	}
}

// FuzzHTTPResponseThroughDoor has the upstream write a response the fuzzer
// chooses — its framing, body, chunk sizes and where its writes split — and
// asserts the client receives exactly what a direct read of the same bytes
// gives: the same status and the same body, byte for byte.
func FuzzHTTPResponseThroughDoor(f *testing.F) {
	f.Add(uint8(0), []byte("hello"), []byte{3, 9}, uint16(4), false, false)
	f.Add(uint8(1), []byte("a chunked body of some length"), []byte{1, 2, 40, 41}, uint16(5), true, false)
	f.Add(uint8(2), []byte("closed at the end"), []byte{0, 17, 18}, uint16(1), false, true)
	f.Add(uint8(1), bytes.Repeat([]byte{0xff}, 5000), []byte{200, 19}, uint16(333), true, true)
	f.Add(uint8(0), []byte{}, []byte{}, uint16(0), false, false)
	h := newHarness(f, mustPolicy(f, testPolicy), func(c *Config) {
		c.AddHosts = map[string][]netip.Addr{"a.test": {netip.MustParseAddr("11.0.0.5")}}
	})
	up := &fuzzUpstream{resp: map[string]fuzzResponse{}}
	h.route("11.0.0.5", server(f, up.serve))
	f.Fuzz(func(t *testing.T, frame uint8, body []byte, splitSeeds []byte, chunk uint16, pause, http10 bool) {
		if len(body) > 64<<10 {
			body = body[:64<<10]
		}
		rnd := rand.New(rand.NewPCG(uint64(chunk), uint64(len(splitSeeds))))
		f := framing(frame % 3)
		raw := responseBytes(f, body, rnd)
		var splits []int
		for i, s := range splitSeeds {
			splits = append(splits, (int(s)*257+i*31)%(len(raw)+1))
		}
		slices.Sort(splits)
		// What a client reading the server directly would get.
		direct, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("the test's own response does not parse: %v", err)
		}
		wantBody, err := io.ReadAll(direct.Body)
		if err != nil {
			t.Fatalf("direct body: %v", err)
		}
		path := up.add(fuzzResponse{raw: raw, splits: splits, pause: pause})
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		proto := "HTTP/1.1"
		if http10 {
			proto = "HTTP/1.0"
		}
		fmt.Fprintf(c, "GET http://a.test%s %s\r\nHost: a.test\r\n\r\n", path, proto)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("through the door: %v", err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("through the door, body: %v", err)
		}
		if resp.StatusCode != direct.StatusCode || !bytes.Equal(got, wantBody) {
			t.Fatalf("framing %s, splits %v: got %d with %d bytes, want %d with %d bytes", f, splits, resp.StatusCode, len(got), direct.StatusCode, len(wantBody))
		}
		if http10 && len(resp.TransferEncoding) > 0 {
			t.Fatalf("an HTTP/1.0 client got %v", resp.TransferEncoding)
		}
	})
}
