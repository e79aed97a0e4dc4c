package testhosts

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RawOptions tunes a raw HTTP server (see ServeRawHTTP).
type RawOptions struct {
	// Seed is mixed into every random choice the server makes (where it cuts
	// a response, chunk sizes and extensions, pauses), so servers with
	// different seeds cut the same response differently. A server answers the
	// same request with the same bytes cut at the same points every time.
	Seed uint64
	// Pause is the longest sleep between two writes of a trickled response;
	// 0 means 2ms.
	Pause time.Duration
}

// RawRequest is what a raw server saw of one request, in arrival order.
type RawRequest struct {
	Conn       int // the connection's number, from 0, in accept order
	Index      int // the request's number on its connection, from 0
	Method     string
	RequestURI string // as it stood on the request line
	Proto      string
	Host       string // the Host header
	Header     http.Header
	BodyLength int64
	BodySHA256 string // hex SHA-256 of the request body as received
}

// rawHandler answers the requests of raw server connections.
type rawHandler struct {
	opts RawOptions

	mu    sync.Mutex
	conns int
	seen  []RawRequest
}

func newRawHandler(opts RawOptions) *rawHandler {
	if opts.Pause <= 0 {
		opts.Pause = 2 * time.Millisecond
	}
	return &rawHandler{opts: opts}
}

func (rh *rawHandler) requests() []RawRequest {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	return slices.Clone(rh.seen)
}

// serveConn reads requests one after another from c (pipelined requests wait
// in the reader) and answers each in order, until one answer must close the
// connection or the client goes.
func (rh *rawHandler) serveConn(c net.Conn) {
	rh.mu.Lock()
	connNo := rh.conns
	rh.conns++
	rh.mu.Unlock()

	br := bufio.NewReaderSize(c, 64<<10)
	for index := 0; ; index++ {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			return
		}
		keep, err := rh.serveOne(c, req, connNo, index)
		if err != nil || !keep {
			return
		}
	}
}

// serveOne answers req. It reports whether the connection may carry another
// request.
func (rh *rawHandler) serveOne(c net.Conn, req *http.Request, connNo, index int) (bool, error) {
	is10 := !req.ProtoAtLeast(1, 1)
	target := req.URL.RequestURI()
	p, perr := parseRawTarget(target)

	// 100 Continue goes before the body is read, as a client that waits for
	// it needs.
	if !is10 && req.ContentLength != 0 && strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false, err
		}
	}
	h := sha256.New()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	n, berr := io.Copy(h, req.Body)
	_ = c.SetReadDeadline(time.Time{})
	reqSum := hex.EncodeToString(h.Sum(nil))
	rh.mu.Lock()
	rh.seen = append(rh.seen, RawRequest{
		Conn: connNo, Index: index, Method: req.Method, RequestURI: req.RequestURI,
		Proto: req.Proto, Host: req.Host, Header: req.Header.Clone(),
		BodyLength: n, BodySHA256: reqSum,
	})
	rh.mu.Unlock()
	if berr != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return false, berr
	}
	if perr != nil {
		msg := perr.Error() + "\n"
		closeAfter := is10 || req.Close
		head := "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(msg)) + "\r\n"
		if closeAfter {
			head += "Connection: close\r\n"
		}
		_, err := io.WriteString(c, head+"\r\n"+msg)
		return !closeAfter && err == nil, err
	}

	ver := p.Version
	if ver == "" {
		ver = "1.1"
		if is10 {
			ver = "1.0"
		}
	}
	frame := p.Frame
	if frame == FrameChunked && (is10 || ver == "1.0") {
		frame = FrameClose
	}
	closeAfter := frame == FrameClose || p.cut >= 0 || req.Close || is10 || ver == "1.0"

	var (
		body    io.Reader
		bodyLen int64
		bodySum string
	)
	if p.upload {
		b := []byte(reqSum + "\n")
		body, bodyLen, bodySum = bytes.NewReader(b), int64(len(b)), sha256Hex(b)
	} else {
		body, bodyLen, bodySum = BodyReader(p.N, p.Seed), p.N, BodySHA256(p.N, p.Seed)
	}

	hs := fnv.New64a()
	_, _ = io.WriteString(hs, req.Method+" "+target)
	rng := rand.New(rand.NewPCG(rh.opts.Seed^p.Seed, hs.Sum64()))
	pause := func() {
		if p.Trickle {
			time.Sleep(time.Duration(1 + rng.Int64N(int64(rh.opts.Pause))))
		}
	}

	if ver == "1.1" && !is10 {
		for i := 0; i < p.Hints; i++ {
			hint := fmt.Sprintf("HTTP/1.1 103 Early Hints\r\nLink: </hint-%d.css>; rel=preload; as=style\r\n\r\n", i)
			split := 1
			if p.Split > 1 {
				split = 2
			}
			if err := writeCut(c, strings.NewReader(hint), int64(len(hint)), chooseCuts(rng, int64(len(hint)), int64(len(hint)), split), pause); err != nil {
				return false, err
			}
			pause()
		}
	}

	var head strings.Builder
	fmt.Fprintf(&head, "HTTP/%s 200 OK\r\nContent-Type: application/octet-stream\r\n", ver)
	var framed io.Reader
	var framedLen int64
	switch frame {
	case FrameLength:
		fmt.Fprintf(&head, "Content-Length: %d\r\n", bodyLen)
		framed, framedLen = body, bodyLen
	case FrameChunked:
		head.WriteString("Transfer-Encoding: chunked\r\nTrailer: X-Trailer-SHA256\r\n")
		framed, framedLen = chunked(rng, body, bodyLen, bodySum)
	case FrameClose:
		framed, framedLen = body, bodyLen
	}
	if closeAfter && ver == "1.1" {
		head.WriteString("Connection: close\r\n")
	}
	fmt.Fprintf(&head, "X-Frame: %s\r\nX-Body-SHA256: %s\r\n\r\n", frame, bodySum)
	if req.Method == http.MethodHead {
		framed, framedLen = strings.NewReader(""), 0
	}
	if p.cut >= 0 && p.cut < framedLen {
		framed, framedLen = io.LimitReader(framed, p.cut), p.cut
	}
	total := int64(head.Len()) + framedLen
	cuts := chooseCuts(rng, int64(head.Len()), total, p.Split)
	if err := writeCut(c, io.MultiReader(strings.NewReader(head.String()), framed), total, cuts, pause); err != nil {
		return false, err
	}
	return !closeAfter, nil
}

// chunked frames the n bytes of body as chunks of random sizes (a quarter of
// them tiny), some sizes with leading zeros or in upper case, some chunks with
// extensions, and a trailer carrying sum. It returns the framed stream and its
// length.
func chunked(rng *rand.Rand, body io.Reader, n int64, sum string) (io.Reader, int64) {
	var parts []io.Reader
	var total int64
	exts := []string{";a=1", `;name="quoted; value"`, ";flag", ";x=y;z"}
	for rem := n; rem > 0; {
		size := 1 + rng.Int64N(64<<10)
		if rng.IntN(4) == 0 {
			size = 1 + rng.Int64N(16)
		}
		size = min(size, rem)
		line := strconv.FormatInt(size, 16)
		switch rng.IntN(6) {
		case 0:
			line = strings.ToUpper(line)
		case 1:
			line = "00" + line
		}
		if rng.IntN(4) == 0 {
			line += exts[rng.IntN(len(exts))]
		}
		line += "\r\n"
		parts = append(parts, strings.NewReader(line), io.LimitReader(body, size), strings.NewReader("\r\n"))
		total += int64(len(line)) + size + 2
		rem -= size
	}
	last := "0\r\nX-Trailer-SHA256: " + sum + "\r\n\r\n"
	parts = append(parts, strings.NewReader(last))
	total += int64(len(last))
	return io.MultiReader(parts...), total
}

// chooseCuts picks up to k-1 points in (0, total) where a response of total
// bytes whose head is headLen long is cut into writes: the first inside the
// head, the second at or next to the head's end, the rest anywhere.
func chooseCuts(rng *rand.Rand, headLen, total int64, k int) []int64 {
	if k <= 1 || total < 2 {
		return nil
	}
	set := map[int64]bool{}
	add := func(at int64) {
		if at > 0 && at < total {
			set[at] = true
		}
	}
	if headLen > 1 {
		add(1 + rng.Int64N(headLen-1))
	}
	if k > 2 {
		add(headLen - 3 + rng.Int64N(7))
	}
	for tries := 0; len(set) < k-1 && tries < 4*k; tries++ {
		add(1 + rng.Int64N(total-1))
	}
	cuts := make([]int64, 0, len(set))
	for at := range set {
		cuts = append(cuts, at)
	}
	slices.Sort(cuts)
	return cuts
}

// writeCut copies total bytes from r to w, with a separate write (and a pause)
// at each cut. Between cuts it writes at most 64 KiB at a time.
func writeCut(w io.Writer, r io.Reader, total int64, cuts []int64, pause func()) error {
	buf := make([]byte, 64<<10)
	var off int64
	for i := 0; i <= len(cuts); i++ {
		end := total
		if i < len(cuts) {
			end = cuts[i]
		}
		for off < end {
			m := int(min(int64(len(buf)), end-off))
			if _, err := io.ReadFull(r, buf[:m]); err != nil {
				return fmt.Errorf("raw response at byte %d: %w", off, err)
			}
			if _, err := w.Write(buf[:m]); err != nil {
				return err
			}
			off += int64(m)
		}
		if i < len(cuts) {
			pause()
		}
	}
	return nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
