//go:build linux

package testhosts

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests here fetch from each server directly, from the root namespace to
// a lab host, with curl and with Go's client, and compare the SHA-256 of what
// arrived with what the server was given to send.

// writeBodies writes Body(n, seed) for every n in sizes as root/<n>.bin.
func writeBodies(t *testing.T, root string, seed uint64, sizes []int64) {
	t.Helper()
	for _, n := range sizes {
		f, err := os.Create(filepath.Join(root, fmt.Sprintf("%d.bin", n)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, BodyReader(n, seed)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// curlFetch runs curl (never through a proxy) with args and returns the
// SHA-256 and length of what it wrote to stdout, its stderr, and its error.
func curlFetch(ctx context.Context, args ...string) (sum string, n int64, stderr string, err error) {
	cmd := exec.CommandContext(ctx, "curl", append([]string{"-sS", "--noproxy", "*", "--max-time", "120"}, args...)...)
	cmd.Env = baseEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, "", err
	}
	var eb bytes.Buffer
	cmd.Stderr = &eb
	if err := cmd.Start(); err != nil {
		return "", 0, "", err
	}
	h := sha256.New()
	n, cerr := io.Copy(h, out)
	err = cmd.Wait()
	if err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), n, eb.String(), err
}

// wgetFetch runs wget (never through a proxy, no retries) for url and
// returns the SHA-256 and length of what it wrote to stdout.
func wgetFetch(ctx context.Context, url string) (sum string, n int64, stderr string, err error) {
	cmd := exec.CommandContext(ctx, "wget", "-q", "--no-proxy", "--tries=1", "--timeout=120", "-O", "-", url)
	cmd.Env = baseEnv()
	var eb bytes.Buffer
	cmd.Stderr = &eb
	h := sha256.New()
	cw := &countWriter{w: h}
	cmd.Stdout = cw
	err = cmd.Run()
	return hex.EncodeToString(h.Sum(nil)), cw.n, eb.String(), err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// directClient is Go's client with no proxy and no automatic decompression.
func directClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableCompression: true, ExpectContinueTimeout: 5 * time.Second},
		Timeout:   2 * time.Minute,
	}
}

// goFetch sends req with c and returns the response (body consumed) with the
// SHA-256 and length of its body.
func goFetch(c *http.Client, req *http.Request) (*http.Response, string, int64, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", 0, err
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	return resp, hex.EncodeToString(h.Sum(nil)), n, err
}

func mustReq(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return strconv.FormatInt(n, 10) + "B"
	}
}

func TestNginxServesStaticFilesByteExact(t *testing.T) {
	RequireTool(t, "nginx", "nginx")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "wget", "wget")
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, err := lab.Host(ctx, "nginx")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(lab.Dir(), "www")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	const seed = 41
	writeBodies(t, root, seed, Sizes)
	srv, err := h.ServeNginx(ctx, NginxOptions{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	c := directClient()

	for _, n := range Sizes {
		want := BodySHA256(n, seed)
		url := fmt.Sprintf("%s%d.bin", srv.URL, n)
		t.Run(sizeName(n), func(t *testing.T) {
			for _, ver := range []string{"--http1.1", "--http1.0"} {
				sum, got, stderr, err := curlFetch(ctx, ver, url)
				if err != nil || sum != want || got != n {
					t.Fatalf("curl %s %s: %d bytes sha256 %s, want %d bytes %s (%v %s)", ver, url, got, sum, n, want, err, stderr)
				}
			}
			sum, got, stderr, err := wgetFetch(ctx, url)
			if err != nil || sum != want || got != n {
				t.Fatalf("wget %s: %d bytes sha256 %s, want %d bytes %s (%v %s)", url, got, sum, n, want, err, stderr)
			}
			resp, sum, got, err := goFetch(c, mustReq(t, ctx, "GET", url, nil))
			if err != nil || sum != want || got != n || resp.ContentLength != n {
				t.Fatalf("go GET %s: %d bytes (Content-Length %d) sha256 %s, want %d bytes %s (%v)", url, got, resp.ContentLength, sum, n, want, err)
			}

			// HEAD: the length, no body.
			resp, _, got, err = goFetch(c, mustReq(t, ctx, "HEAD", url, nil))
			if err != nil || resp.StatusCode != 200 || resp.ContentLength != n || got != 0 {
				t.Fatalf("HEAD %s: status %v length %d body %d (%v)", url, resp.StatusCode, resp.ContentLength, got, err)
			}

			// Validators: the same ETag / Last-Modified answer 304.
			etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
			if etag == "" || lastMod == "" {
				t.Fatalf("HEAD %s: no ETag (%q) or Last-Modified (%q)", url, etag, lastMod)
			}
			for k, v := range map[string]string{"If-None-Match": etag, "If-Modified-Since": lastMod} {
				req := mustReq(t, ctx, "GET", url, nil)
				req.Header.Set(k, v)
				resp, _, got, err := goFetch(c, req)
				if err != nil || resp.StatusCode != http.StatusNotModified || got != 0 {
					t.Fatalf("GET %s with %s: status %v body %d (%v), want 304", url, k, resp.StatusCode, got, err)
				}
			}

			// Ranges: a middle slice and a suffix.
			if n >= 3 {
				lo := n / 3
				hi := lo + max(1, min(n/3, 1<<20)) - 1
				full := Body(hi+1, seed)
				req := mustReq(t, ctx, "GET", url, nil)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
				resp, sum, got, err := goFetch(c, req)
				if wantSum := sha256Hex(full[lo : hi+1]); err != nil || resp.StatusCode != http.StatusPartialContent || sum != wantSum || got != hi-lo+1 {
					t.Fatalf("GET %s bytes=%d-%d: status %v %d bytes %s, want 206 %d bytes %s (%v)", url, lo, hi, resp.StatusCode, got, sum, hi-lo+1, wantSum, err)
				}
				sum, got, stderr, err := curlFetch(ctx, "-r", fmt.Sprintf("-%d", min(n, 100)), url)
				tail := Body(n, seed)[n-min(n, 100):]
				if err != nil || sum != sha256Hex(tail) || got != int64(len(tail)) {
					t.Fatalf("curl -r -100 %s: %d bytes %s (%v %s)", url, got, sum, err, stderr)
				}
			}
		})
	}

	t.Run("gzip", func(t *testing.T) {
		for _, n := range []int64{0, 13, 16 << 10, 1 << 20} {
			url := fmt.Sprintf("%sgz/%d.bin", srv.URL, n)
			req := mustReq(t, ctx, "GET", url, nil)
			req.Header.Set("Accept-Encoding", "gzip")
			resp, _, _, err := goFetch(c, req)
			if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("GET %s: Content-Encoding %q (%v), want gzip", url, resp.Header.Get("Content-Encoding"), err)
			}
			for _, ver := range []string{"--http1.1", "--http1.0"} {
				sum, got, stderr, err := curlFetch(ctx, ver, "--compressed", url)
				if err != nil || sum != BodySHA256(n, seed) || got != n {
					t.Fatalf("curl %s --compressed %s: %d bytes %s (%v %s)", ver, url, got, sum, err, stderr)
				}
			}
		}
	})

	t.Run("keep-alive", func(t *testing.T) {
		// Go's client: every request after the first reuses the connection.
		c := directClient()
		var reused []bool
		for i := 0; i < 5; i++ {
			req := mustReq(t, ctx, "GET", srv.URL+"13.bin", nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) { reused = append(reused, ci.Reused) },
			}))
			if _, sum, _, err := goFetch(c, req); err != nil || sum != BodySHA256(13, seed) {
				t.Fatalf("request %d: %s %v", i, sum, err)
			}
		}
		if fmt.Sprint(reused) != "[false true true true true]" {
			t.Fatalf("connection reuse = %v, want one connection for all five", reused)
		}
		// curl: three URLs on one connection.
		cmd := exec.CommandContext(ctx, "curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
			"-w", "%{num_connects} ", srv.URL+"1.bin", srv.URL+"13.bin", srv.URL+"16384.bin")
		cmd.Env = baseEnv()
		out, err := cmd.Output()
		if err != nil || string(out) != "1 0 0 " {
			t.Fatalf("curl num_connects = %q (%v), want 1 0 0", out, err)
		}
	})
}

func TestPythonServesHTTP10AndCloseDelimited(t *testing.T) {
	RequireTool(t, "python3", "python3")
	RequireTool(t, "curl", "curl")
	RequireTool(t, "wget", "wget")
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, err := lab.Host(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(lab.Dir(), "www")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	const seed = 43
	writeBodies(t, root, seed, Sizes)
	srv, err := h.ServePython(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := directClient()
	for _, n := range Sizes {
		want := BodySHA256(n, seed)
		t.Run(sizeName(n), func(t *testing.T) {
			for _, path := range []string{"", "close/"} {
				url := fmt.Sprintf("%s%s%d.bin", srv.URL, path, n)
				resp, sum, got, err := goFetch(c, mustReq(t, ctx, "GET", url, nil))
				if err != nil || sum != want || got != n {
					t.Fatalf("go GET %s: %d bytes %s, want %d bytes %s (%v)", url, got, sum, n, want, err)
				}
				if resp.Proto != "HTTP/1.0" {
					t.Fatalf("GET %s answered %s, want HTTP/1.0", url, resp.Proto)
				}
				if path == "" && resp.ContentLength != n {
					t.Fatalf("GET %s: Content-Length %d, want %d", url, resp.ContentLength, n)
				}
				if path == "close/" && (resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "") {
					t.Fatalf("GET %s: Content-Length %q, want none (close-delimited)", url, resp.Header.Get("Content-Length"))
				}
				sum, got, stderr, err := curlFetch(ctx, url)
				if err != nil || sum != want || got != n {
					t.Fatalf("curl %s: %d bytes %s, want %d bytes %s (%v %s)", url, got, sum, n, want, err, stderr)
				}
				sum, got, stderr, err = wgetFetch(ctx, url)
				if err != nil || sum != want || got != n {
					t.Fatalf("wget %s: %d bytes %s, want %d bytes %s (%v %s)", url, got, sum, n, want, err, stderr)
				}
			}
		})
	}
	// One request per connection: the server closes after each.
	conn, err := net.DialTimeout("tcp", srv.Addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /13.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /13.bin HTTP/1.1\r\nHost: x\r\n\r\n")
	all, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if c := bytes.Count(all, []byte("HTTP/1.0 200")); c != 1 {
		t.Fatalf("two pipelined requests got %d responses before close, want 1:\n%q", c, all)
	}
}

// rawCase is one fetch from the raw server and what it must give.
type rawCase struct {
	name string
	q    RawQuery
}

func rawCases() []rawCase {
	var cases []rawCase
	for _, n := range Sizes {
		for _, f := range []Frame{FrameLength, FrameChunked, FrameClose} {
			q := RawQuery{N: n, Seed: uint64(n) + 5, Frame: f, Split: 7, Trickle: n <= 1<<20}
			cases = append(cases, rawCase{fmt.Sprintf("%s/%s/split7", sizeName(n), f), q})
			if n < 100<<20 {
				q.Split, q.Trickle = 0, false
				cases = append(cases, rawCase{fmt.Sprintf("%s/%s/whole", sizeName(n), f), q})
			}
		}
	}
	cases = append(cases,
		rawCase{"hints/cl", RawQuery{N: 16<<10 + 1, Seed: 9, Hints: 2, Split: 5, Trickle: true}},
		rawCase{"hints/chunked", RawQuery{N: 13, Seed: 9, Frame: FrameChunked, Hints: 1, Split: 9, Trickle: true}},
		rawCase{"status1.0/cl", RawQuery{N: 1 << 20, Seed: 10, Version: "1.0", Split: 4}},
		rawCase{"status1.0/close", RawQuery{N: 16 << 10, Seed: 10, Frame: FrameClose, Version: "1.0", Trickle: true}},
	)
	return cases
}

func TestRawServerEveryModeDirect(t *testing.T) {
	RequireTool(t, "curl", "curl")
	RequireTool(t, "wget", "wget")
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := lab.Host(ctx, "raw")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := h.ServeRawHTTP(0, RawOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(srv.URL, "/")
	c := directClient()

	for _, tc := range rawCases() {
		t.Run(tc.name, func(t *testing.T) {
			url := base + tc.q.Path()
			want := tc.q.SHA256()
			for _, ver := range []string{"--http1.1", "--http1.0"} {
				sum, got, stderr, err := curlFetch(ctx, ver, url)
				if err != nil || sum != want || got != tc.q.N {
					t.Fatalf("curl %s %s: %d bytes %s, want %d bytes %s (%v %s)", ver, url, got, sum, tc.q.N, want, err, stderr)
				}
			}
			sum, got, stderr, err := wgetFetch(ctx, url)
			if err != nil || sum != want || got != tc.q.N {
				t.Fatalf("wget %s: %d bytes %s, want %d bytes %s (%v %s)", url, got, sum, tc.q.N, want, err, stderr)
			}
			var hints int
			req := mustReq(t, ctx, "GET", url, nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { hints++; return nil },
			}))
			resp, sum, got, err := goFetch(c, req)
			if err != nil || sum != want || got != tc.q.N {
				t.Fatalf("go GET %s: %d bytes %s, want %d bytes %s (%v)", url, got, sum, tc.q.N, want, err)
			}
			if resp.Header.Get("X-Body-SHA256") != want {
				t.Fatalf("X-Body-SHA256 %q, want %s", resp.Header.Get("X-Body-SHA256"), want)
			}
			if hints != tc.q.Hints {
				t.Fatalf("go client saw %d 1xx responses, want %d", hints, tc.q.Hints)
			}
			if tc.q.Frame == FrameChunked && (len(resp.TransferEncoding) != 1 || resp.Trailer.Get("X-Trailer-SHA256") != want) {
				t.Fatalf("chunked: transfer-encoding %v trailer %v", resp.TransferEncoding, resp.Trailer)
			}
		})
	}

	t.Run("reproducible", func(t *testing.T) {
		// The same request gives the same bytes on the wire, cut the same way.
		path := RawQuery{N: 100, Seed: 1, Frame: FrameChunked, Split: 12}.Path()
		a, b := rawWire(t, srv.Addr.String(), "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
			rawWire(t, srv.Addr.String(), "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if !bytes.Equal(a, b) {
			t.Fatalf("two fetches of %s differ:\n%q\n%q", path, a, b)
		}
	})

	t.Run("early-close", func(t *testing.T) {
		q := RawQuery{N: 1 << 20, Seed: 12, Cut: 5000, Split: 3, Trickle: true}
		url := base + q.Path()
		_, got, stderr, err := curlFetch(ctx, url)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 18 || got != q.Cut {
			t.Fatalf("curl %s: %d bytes, %v %s; want exit 18 (partial file) after %d bytes", url, got, err, stderr, q.Cut)
		}
		resp, err := c.Do(mustReq(t, ctx, "GET", url, nil))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != io.ErrUnexpectedEOF || !bytes.Equal(b, Body(q.Cut, q.Seed)) {
			t.Fatalf("go GET %s: %d bytes, %v; want the first %d bytes then unexpected EOF", url, len(b), err, q.Cut)
		}
	})

	t.Run("pipelined", func(t *testing.T) {
		qs := []RawQuery{
			{N: 13, Seed: 1},
			{N: 16 << 10, Seed: 2, Frame: FrameChunked, Split: 6, Trickle: true},
			{N: 0, Seed: 3},
			{N: 1 << 20, Seed: 4, Split: 8},
		}
		var reqs strings.Builder
		for _, q := range qs {
			fmt.Fprintf(&reqs, "GET %s HTTP/1.1\r\nHost: pipe\r\n\r\n", q.Path())
		}
		conn, err := net.DialTimeout("tcp", srv.Addr.String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		before := len(srv.Requests())
		if _, err := io.WriteString(conn, reqs.String()); err != nil { // all of them in one write
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		for i, q := range qs {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || sha256Hex(b) != q.SHA256() {
				t.Fatalf("response %d: %d bytes %s, want %s (%v)", i, len(b), sha256Hex(b), q.SHA256(), err)
			}
		}
		seen := srv.Requests()[before:]
		if len(seen) != len(qs) {
			t.Fatalf("server saw %d requests, want %d", len(seen), len(qs))
		}
		for i, r := range seen {
			if r.Conn != seen[0].Conn || r.Index != i || r.RequestURI != qs[i].Path() {
				t.Fatalf("request %d seen as %+v", i, r)
			}
		}
	})

	t.Run("100-continue", func(t *testing.T) {
		upload := Body(3<<20, 77)
		want := sha256Hex(upload)
		file := filepath.Join(lab.Dir(), "upload.bin")
		if err := os.WriteFile(file, upload, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, frame := range []Frame{FrameLength, FrameChunked} {
			url := fmt.Sprintf("%s/upload?frame=%s&split=5&trickle=1", base, frame)
			// curl waits up to 30s for the 100 before it sends the body anyway: a
			// server that never said 100 would make this take 30s, not fail it,
			// so the Go client below checks that 100 came.
			sum, _, stderr, err := curlFetch(ctx, "-H", "Expect: 100-continue", "--expect100-timeout", "30", "--data-binary", "@"+file, url)
			if err != nil || sum != sha256Hex([]byte(want+"\n")) {
				t.Fatalf("curl upload to %s: answer sha256 %s (%v %s), want the answer %q", url, sum, err, stderr, want)
			}
			var got100 bool
			req := mustReq(t, ctx, "PUT", url, bytes.NewReader(upload))
			req.Header.Set("Expect", "100-continue")
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got100Continue: func() { got100 = true },
			}))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != want+"\n" || !got100 {
				t.Fatalf("go PUT %s: %q (%v), 100 Continue seen %v; want %s", url, b, err, got100, want)
			}
		}
		// The server got both uploads whole, after saying 100 Continue.
		var n int
		for _, r := range srv.Requests() {
			if strings.HasPrefix(r.RequestURI, "/upload") {
				n++
				if r.BodySHA256 != want || r.BodyLength != int64(len(upload)) {
					t.Fatalf("upload seen as %d bytes %s, want %d %s", r.BodyLength, r.BodySHA256, len(upload), want)
				}
			}
		}
		if n != 4 {
			t.Fatalf("server saw %d uploads, want 4", n)
		}
	})

	t.Run("http1.0-gets-no-chunks", func(t *testing.T) {
		q := RawQuery{N: 100, Seed: 5, Frame: FrameChunked}
		wire := rawWire(t, srv.Addr.String(), "GET "+q.Path()+" HTTP/1.0\r\n\r\n")
		head, body, _ := bytes.Cut(wire, []byte("\r\n\r\n"))
		if !bytes.HasPrefix(head, []byte("HTTP/1.0 200")) || bytes.Contains(bytes.ToLower(head), []byte("chunked")) || !bytes.Equal(body, Body(100, 5)) {
			t.Fatalf("HTTP/1.0 request for a chunked body got:\n%q", wire)
		}
	})
}

// rawWire sends request on a new connection and returns everything the
// server sends until it closes.
func rawWire(t *testing.T, addr, request string) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
