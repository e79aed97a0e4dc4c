package door

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door/policy"
)

// proxyIdleTimeout bounds how long a keep-alive proxy connection may wait for
// its next request.
const proxyIdleTimeout = 2 * time.Minute

// maxRequestHead bounds an explicit-proxy request head (request line and
// headers); the reader that holds it goes back to a pool when the connection
// becomes a tunnel or closes.
const maxRequestHead = 16 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxRequestHead) }}

// errHeadTooBig is a request head that does not fit maxRequestHead.
var errHeadTooBig = fmt.Errorf("request head larger than %d bytes", maxRequestHead)

// peekHead waits until a whole request head is buffered in br and returns it
// without consuming it.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for {
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
				return b[:i+4], nil
			}
			if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
				return b[:i+2], nil
			}
			if n >= br.Size() {
				return nil, errHeadTooBig
			}
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if br.Buffered() > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// headerHost returns the value of the Host header of a raw request head.
func headerHost(head []byte) (string, bool) {
	lines := bytes.Split(head, []byte("\n"))
	for _, l := range lines[1:] {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if ok && strings.EqualFold(string(k), "host") {
			return string(bytes.TrimSpace(v)), true
		}
	}
	return "", false
}

// refuseUnreadable answers a request the door cannot parse, and records it.
func (d *Door) refuseUnreadable(c net.Conn, err error) {
	id := d.connID.Add(1)
	reason := fmt.Sprintf("unreadable request: %v", err)
	j := Judgement{Decision: policy.Decision{Verdict: policy.Deny, Reason: reason}}
	d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
	code, status := 400, "Bad Request"
	if errors.Is(err, errHeadTooBig) {
		code, status = 431, "Request Header Fields Too Large"
	}
	writeStatus(c, code, status, fmt.Sprintf("postern door could not read the request: %v\nsend CONNECT host:port or an absolute-URI request (GET http://host/path HTTP/1.1)\n", err), true,
		"X-Postern-Decision: "+decisionHeader(reason))
}

// aLongTimeAgo is a deadline in the past, to unblock a read.
var aLongTimeAgo = time.Unix(1, 0)

// serveProxy serves one explicit-proxy connection: CONNECT, or absolute-URI
// HTTP requests with keep-alive, each request judged on its own.
func (d *Door) serveProxy(ctx context.Context, c net.Conn) {
	cr := newClientReader(ctx, c)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(cr)
	fw := &httpForwarder{d: d, client: c}
	defer fw.closeUpstream()
	req := d.serveRequests(ctx, c, br, cr, fw)
	if req == nil {
		putReader(br)
		return
	}
	pre, _ := br.Peek(br.Buffered())
	pre = slices.Clone(pre)
	putReader(br)
	fw.closeUpstream()
	d.handleConnect(ctx, c, req, pre)
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

// clientReader is what a proxy connection's bufio.Reader reads from. While a
// request head is awaited, a read that finds nothing arms the idle deadline
// before it waits; a head that is already there (the usual first request)
// costs no timer.
type clientReader struct {
	ctx    context.Context
	c      net.Conn
	rc     syscall.RawConn // nil: arm before every read of a head
	idleBy time.Time       // zero: no head awaited
	armed  bool
}

func newClientReader(ctx context.Context, c net.Conn) *clientReader {
	cr := &clientReader{ctx: ctx, c: c}
	if rc, ok := rawConn(c); ok {
		cr.rc = rc
	}
	return cr
}

// awaitHead starts the wait for a request head, idle until by at most.
func (r *clientReader) awaitHead(by time.Time) { r.idleBy, r.armed = by, false }

// headDone ends it, clearing the deadline if one was armed.
func (r *clientReader) headDone() {
	if r.armed {
		r.c.SetReadDeadline(time.Time{})
	}
	r.idleBy, r.armed = time.Time{}, false
}

func (r *clientReader) Read(p []byte) (int, error) {
	if r.idleBy.IsZero() || r.armed || len(p) == 0 {
		return r.c.Read(p)
	}
	if r.rc != nil {
		var (
			n     int
			rerr  error
			would bool
		)
		err := r.rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = unix.Read(int(fd), p)
				if rerr != unix.EINTR {
					break
				}
			}
			would = rerr == unix.EAGAIN
			return true // never wait here
		})
		switch {
		case err != nil:
			return 0, err
		case would:
		case rerr != nil:
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
		case n == 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
	r.armed = true
	r.c.SetReadDeadline(r.idleBy)
	if r.ctx.Err() != nil {
		r.c.SetReadDeadline(aLongTimeAgo) // draining began before the deadline was armed
	}
	return r.c.Read(p)
}

// serveRequests reads requests from br (reading from cr) and forwards them
// until the connection ends. It returns a CONNECT request for the caller to
// tunnel (explicit proxy only), else nil.
func (d *Door) serveRequests(ctx context.Context, c net.Conn, br *bufio.Reader, cr *clientReader, fw *httpForwarder) *http.Request {
	for {
		cr.awaitHead(time.Now().Add(proxyIdleTimeout))
		stopWatch := context.AfterFunc(ctx, func() { c.SetReadDeadline(aLongTimeAgo) })
		head, err := peekHead(br)
		var req *http.Request
		if err == nil {
			req, err = http.ReadRequest(br)
		}
		stopped := stopWatch()
		if err != nil {
			if !errors.Is(err, io.EOF) && !isClosedOrTimeout(err) && stopped {
				d.refuseUnreadable(c, err)
			}
			return nil
		}
		// ReadRequest drops the Host header; keep it to hold it against the URI.
		if hh, ok := headerHost(head); ok {
			req.Header.Set("Host", hh)
		}
		if !stopped {
			return nil // draining: no new requests
		}
		cr.headDone()
		if req.Method == http.MethodConnect && fw.pinned == nil {
			return req
		}
		if !fw.serve(ctx, req, br) {
			return nil
		}
	}
}

func isClosedOrTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && ne.Timeout())
}

// connectEstablished is the whole answer to an admitted CONNECT, written in
// one call.
var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")

// handleConnect judges a CONNECT and, if admitted, tunnels it. pre are bytes
// the client sent after the request head.
func (d *Door) handleConnect(ctx context.Context, c net.Conn, req *http.Request, pre []byte) {
	id := d.connID.Add(1)
	start := time.Now()
	host, port, err := policy.SplitTarget(req.RequestURI, 443)
	if err != nil {
		j := Judgement{Host: policy.Host{Name: req.RequestURI}, Port: 0,
			Decision: policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("bad connect target %q: %v", req.RequestURI, err)}}
		d.emit(d.decisionEvent(id, "connect", c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, fmt.Sprintf("postern door denied CONNECT %s\nreason: %s\nwrite the target as host:port, e.g. CONNECT example.com:443\n", req.RequestURI, j.Decision.Reason), true)
		return
	}
	j := d.Decide(ctx, host, port)
	what := "CONNECT " + targetString(host, port)
	if !j.Allowed() {
		d.emit(d.decisionEvent(id, "connect", c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, d.denyText(what, j), true)
		return
	}
	up, addr, err := d.dialJudged(ctx, j)
	j.Addr = addr
	if err != nil {
		d.emit(d.decisionEvent(id, "connect", c.RemoteAddr(), j))
		writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", what, err), true)
		d.emitEnd(id, "connect", j, 0, 0, start, "dial failed: "+err.Error())
		return
	}
	defer up.Close()
	d.track(up)
	defer d.untrack(up)
	// The client waits for the 200; the decision is recorded right after it
	// goes out, before any of the client's bytes are read.
	_, werr := c.Write(connectEstablished)
	d.emit(d.decisionEvent(id, "connect", c.RemoteAddr(), j))
	if werr != nil {
		d.emitEnd(id, "connect", j, 0, 0, start, "client went away")
		return
	}
	upN, downN, denied := d.pipe(c, up, pre, func(fb firstBytes, herr error) bool {
		return d.judgeHead(id, "connect", c, j, fb, herr, headRules{})
	}, func(head []byte) (int64, int64) {
		return d.servePinnedHTTP(ctx, c, up, addr, j, id, "connect", head)
	})
	reason := "closed"
	if denied {
		reason = "refused on first bytes"
	}
	d.emitEnd(id, "connect", j, upN, downN, start, reason)
}

// judgeHead checks a connection's first bytes and records a refusal. It
// reports whether the connection must be refused (never in observe mode).
func (d *Door) judgeHead(id uint64, kind string, c net.Conn, j Judgement, fb firstBytes, herr error, rules headRules) bool {
	reason := d.checkHead(j, fb, herr, rules)
	if reason == "" {
		return false
	}
	hj := j
	hj.Decision = policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: j.Decision.Rule}
	if d.policy().Mode == policy.Observe {
		hj.Decision.Verdict = policy.Allow
		hj.Decision.WouldDeny = true
	}
	d.emit(d.decisionEvent(id, kind, c.RemoteAddr(), hj))
	return hj.Decision.Verdict == policy.Deny
}

func (d *Door) emitEnd(id uint64, kind string, j Judgement, up, down int64, start time.Time, reason string) {
	ev := Event{
		Event:      "end",
		Conn:       id,
		Kind:       kind,
		Host:       hostString(j.Host),
		Port:       j.Port,
		Decision:   j.Decision.Verdict.String(),
		Reason:     reason,
		BytesUp:    up,
		BytesDown:  down,
		DurationMS: time.Since(start).Milliseconds(),
	}
	if j.Addr.IsValid() {
		ev.Addr = j.Addr.String()
	}
	d.emit(ev)
}

// httpForwarder forwards absolute-URI requests on one client connection,
// keeping the last upstream connection for the next request to the same place.
type httpForwarder struct {
	d      *Door
	client net.Conn

	up     net.Conn
	upBR   *bufio.Reader
	upKey  string
	upAddr netip.Addr
	upR    upstreamReader // under upBR
	// upUsed is set once up has carried a whole exchange: from then on the
	// server may close it while it waits for the next request.
	upUsed bool

	// pinned is set for plain HTTP on a connection admitted for one host (a
	// CONNECT tunnel, or a redirected connection): every request on it must
	// name that host, and goes to that host only. pinnedKind is the
	// connection's kind in events.
	pinned     *Judgement
	pinnedID   uint64
	pinnedKind string
	// Totals over a pinned connection, for its one end event.
	upTotal, downTotal int64
}

// end records a finished request: its own end event on the explicit proxy, a
// share of the connection's totals on the transparent side.
func (f *httpForwarder) end(id uint64, j Judgement, up, down int64, start time.Time, reason string) {
	f.upTotal += up
	f.downTotal += down
	if f.pinned == nil {
		f.d.emitEnd(id, "http", j, up, down, start, reason)
	}
}

// servePinned checks one request on a pinned connection against the host the
// connection was admitted for, then forwards it.
func (f *httpForwarder) servePinned(ctx context.Context, req *http.Request, br *bufio.Reader) bool {
	d, c, j := f.d, f.client, *f.pinned
	start := time.Now()
	what := req.Method + " " + req.RequestURI
	if req.Method == http.MethodConnect {
		writeStatus(c, 400, "Bad Request", fmt.Sprintf("postern door: CONNECT is for the door itself, not for a connection already admitted to %s\n", targetString(j.Host, j.Port)), true)
		return false
	}
	host := req.Host
	if hh := req.Header.Get("Host"); hh != "" {
		host = hh
	}
	fb := firstBytes{kind: headHTTP, name: host}
	if d.judgeHead(f.pinnedID, f.pinnedKind, c, j, fb, nil, headRules{}) {
		reason := d.checkHead(j, fb, nil, headRules{})
		writeDenied(c, reason, d.headDenyText(what, j, reason), true)
		return false
	}
	if f.up == nil {
		up, addr, err := d.dialJudged(ctx, j)
		if err != nil {
			writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", targetString(j.Host, j.Port), err), true)
			return false
		}
		d.track(up)
		f.setUpstream(up, targetString(j.Host, j.Port), addr)
	}
	j.Addr = f.upAddr
	return f.forwardOrRetry(ctx, f.pinnedID, j, req, br, start)
}

// servePinnedHTTP serves plain HTTP on a connection admitted for j (a CONNECT
// tunnel, or a redirected connection), whose upstream up is connected to
// addr: request by request, each held to j's host. head is what the client
// has sent so far. It returns the bytes moved each way.
func (d *Door) servePinnedHTTP(ctx context.Context, c, up net.Conn, addr netip.Addr, j Judgement, id uint64, kind string, head []byte) (int64, int64) {
	cr := newClientReader(ctx, c)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(io.MultiReader(bytes.NewReader(head), cr))
	fw := &httpForwarder{d: d, client: c, pinned: &j, pinnedID: id, pinnedKind: kind}
	fw.setUpstream(up, targetString(j.Host, j.Port), addr)
	d.serveRequests(ctx, c, br, cr, fw)
	fw.closeUpstream()
	putReader(br)
	return fw.upTotal, fw.downTotal
}

// setUpstream makes up the connection requests go out on.
func (f *httpForwarder) setUpstream(up net.Conn, key string, addr netip.Addr) {
	f.up, f.upKey, f.upAddr, f.upUsed = up, key, addr, false
	f.upR = upstreamReader{c: up}
	f.upBR = bufio.NewReaderSize(&f.upR, 16<<10)
}

func (f *httpForwarder) closeUpstream() {
	if f.up != nil {
		f.d.untrack(f.up)
		f.up = nil
		f.upBR = nil
		f.upKey = ""
		f.upUsed = false
	}
}

// hopHeaders are connection-level headers a proxy must not forward (RFC 9110
// 7.6.1), plus the proxy's own.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
	"Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders strips hop-by-hop headers, including those Connection
// names. It returns the Upgrade value if the sender asked to upgrade.
func removeHopHeaders(h http.Header) (upgrade string) {
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			tok = textproto.TrimString(tok)
			if strings.EqualFold(tok, "upgrade") {
				upgrade = h.Get("Upgrade")
			}
			if tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	return upgrade
}

// serve judges and forwards one request; false means the client connection
// must close.
func (f *httpForwarder) serve(ctx context.Context, req *http.Request, br *bufio.Reader) bool {
	if f.pinned != nil {
		return f.servePinned(ctx, req, br)
	}
	d, c := f.d, f.client
	id := d.connID.Add(1)
	start := time.Now()
	closeAfter := req.Close || req.ContentLength != 0

	if req.URL.Scheme == "" || req.URL.Host == "" {
		writeStatus(c, 400, "Bad Request", fmt.Sprintf("postern door is a proxy: send an absolute URI (GET http://host/path) or CONNECT host:port, not %q\n", req.RequestURI), true)
		return false
	}
	if !strings.EqualFold(req.URL.Scheme, "http") {
		writeStatus(c, 400, "Bad Request", fmt.Sprintf("postern door forwards only http:// requests; for %s use CONNECT %s\n", req.URL.Scheme, req.URL.Host), true)
		return false
	}
	host, port, err := policy.SplitTarget(req.URL.Host, 80)
	what := req.Method + " " + req.URL.String()
	if err != nil {
		j := Judgement{Host: policy.Host{Name: req.URL.Host}, Decision: policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("bad request host %q: %v", req.URL.Host, err)}}
		d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, d.headDenyText(what, j, j.Decision.Reason), true)
		return false
	}
	if hh := req.Header.Get("Host"); hh != "" {
		hhost, _, herr := policy.SplitTarget(hh, port)
		if herr != nil || !sameHost(hhost, host) {
			j := Judgement{Host: host, Port: port, Decision: policy.Decision{Verdict: policy.Deny,
				Reason: fmt.Sprintf("http host %s does not match request target %s", hh, hostString(host))}}
			d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
			writeDenied(c, j.Decision.Reason, d.headDenyText(what, j, j.Decision.Reason), true)
			return false
		}
	}
	j := d.Decide(ctx, host, port)
	if !j.Allowed() {
		d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, d.denyText(what, j), closeAfter)
		return !closeAfter
	}
	key := targetString(host, port)
	if f.up == nil || f.upKey != key || !slices.Contains(j.Addrs, f.upAddr) {
		f.closeUpstream()
		up, addr, err := d.dialJudged(ctx, j)
		j.Addr = addr
		if err != nil {
			d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
			writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", what, err), true)
			d.emitEnd(id, "http", j, 0, 0, start, "dial failed: "+err.Error())
			return false
		}
		d.track(up)
		f.setUpstream(up, key, addr)
	}
	j.Addr = f.upAddr
	d.emit(d.decisionEvent(id, "http", c.RemoteAddr(), j))
	return f.forwardOrRetry(ctx, id, j, req, br, start)
}

// forwardOrRetry forwards req; if a kept upstream connection turns out to
// have been closed by the server while idle, it sends a replayable request
// once more on a new connection to the same judged addresses, as an HTTP
// client would, instead of answering 502.
func (f *httpForwarder) forwardOrRetry(ctx context.Context, id uint64, j Judgement, req *http.Request, br *bufio.Reader, start time.Time) bool {
	keep, retry := f.forward(id, j, req, br, start)
	if !retry {
		return keep
	}
	up, addr, err := f.d.dialJudged(ctx, j)
	if err != nil {
		writeStatus(f.client, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", targetString(j.Host, j.Port), err), true)
		f.end(id, j, 0, 0, start, "dial failed: "+err.Error())
		return false
	}
	f.d.track(up)
	f.setUpstream(up, targetString(j.Host, j.Port), addr)
	j.Addr = addr
	keep, _ = f.forward(id, j, req, br, start)
	return keep
}

// replayable says whether a request may be sent again on a new upstream
// connection: no body, and a method that is safe to repeat (RFC 9110 9.2.1).
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	return req.Body == nil || req.Body == http.NoBody
}

// closedWhileIdle says whether err is what a kept upstream connection that
// the server closed while idle gives: EOF before any byte of a response, or a
// reset.
func closedWhileIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// forward sends one judged request to the current upstream and its response
// back; keep false means the client connection must close. retry means
// nothing was answered because the kept upstream connection had been closed
// by the server, and the request may be sent again on a new one.
func (f *httpForwarder) forward(id uint64, j Judgement, req *http.Request, br *bufio.Reader, start time.Time) (keep, retry bool) {
	c := f.client
	key := f.upKey
	upgrade := removeHopHeaders(req.Header)
	if upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	}
	req.Header.Del("Host")
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // write none, as the client sent none
	}
	req.RequestURI = ""

	upCount := &countWriter{w: f.up}
	wrote := make(chan error, 1)
	if req.Body == nil || req.Body == http.NoBody {
		// Nothing to stream: the request goes out in one write before the
		// response is read.
		wrote <- req.Write(upCount)
	} else {
		// A body is written while the response is read: an upstream may
		// answer (and stop reading) before the body ends.
		go func() { wrote <- req.Write(upCount) }()
	}

	var (
		resp    *http.Response
		rerr    error
		downCnt = &countWriter{w: c}
	)
	// The response head and whatever of the body has arrived go to the
	// client in one write; the upstream reader writes out what is buffered
	// before it waits for more, so nothing is held back.
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(downCnt)
	f.upR.flush = bw
	defer func() {
		f.upR.flush = nil
		bw.Reset(nil)
		writerPool.Put(bw)
	}()
	// A kept connection the server has closed gives EOF before any byte.
	if _, perr := f.upBR.Peek(1); perr != nil {
		rerr = perr
	}
	for rerr == nil {
		resp, rerr = http.ReadResponse(f.upBR, req)
		if rerr != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// A 1xx interim response (100 Continue): pass it on and read on.
		fmt.Fprintf(bw, "HTTP/1.1 %s\r\n", resp.Status)
		resp.Header.Write(bw)
		io.WriteString(bw, "\r\n")
		bw.Flush()
	}
	if rerr != nil {
		kept := f.upUsed
		f.up.Close()
		<-wrote
		f.closeUpstream()
		if kept && downCnt.n == 0 && replayable(req) && closedWhileIdle(rerr) {
			return false, true
		}
		writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door: upstream %s gave no valid response: %v\n", key, rerr), true)
		f.end(id, j, upCount.n, downCnt.n, start, "bad upstream response")
		return false, false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && upgrade != "" {
		if werr := <-wrote; werr != nil {
			f.closeUpstream()
			f.end(id, j, upCount.n, downCnt.n, start, "request write failed")
			return false, false
		}
		to := removeHopHeaders(resp.Header)
		if to == "" {
			to = upgrade
		}
		resp.Header.Set("Connection", "Upgrade")
		resp.Header.Set("Upgrade", to)
		return f.switchProtocols(id, j, resp, br, upCount.n, downCnt, start), false
	}
	removeHopHeaders(resp.Header)
	werr := resp.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	resp.Body.Close()
	if err := <-wrote; err != nil || werr != nil || resp.Close {
		f.closeUpstream()
		f.end(id, j, upCount.n, downCnt.n, start, "closed")
		return werr == nil && err == nil && !req.Close && !resp.Close, false
	}
	f.upUsed = true
	f.end(id, j, upCount.n, downCnt.n, start, "response complete")
	return !req.Close, false
}

// switchProtocols completes a 101 upgrade and relays raw bytes both ways.
func (f *httpForwarder) switchProtocols(id uint64, j Judgement, resp *http.Response, br *bufio.Reader, up int64, downCnt *countWriter, start time.Time) bool {
	d, c := f.d, f.client
	resp.Write(downCnt)
	down := downCnt.n
	if n := f.upBR.Buffered(); n > 0 {
		b, _ := f.upBR.Peek(n)
		w, _ := c.Write(b)
		down += int64(w)
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		w, _ := f.up.Write(b)
		up += int64(w)
	}
	upc := f.up
	f.up, f.upBR, f.upKey = nil, nil, ""
	downc := make(chan int64, 1)
	go func() { downc <- pump(c, upc) }()
	up += pump(upc, c)
	down += <-downc
	d.untrack(upc)
	f.end(id, j, up, down, start, "upgraded connection closed")
	return false
}

// writerPool holds the buffers responses are written to clients through.
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// upstreamReader is what an upstream connection's bufio.Reader reads from.
// Before each read of the connection, which may wait, it writes out what is
// buffered for the client: a response that arrived whole goes out in one
// write, and a streamed one (server-sent events, long polls) is passed on as
// it comes.
type upstreamReader struct {
	c     net.Conn
	flush *bufio.Writer // nil between responses
}

func (u *upstreamReader) Read(p []byte) (int, error) {
	if u.flush != nil && u.flush.Buffered() > 0 {
		if err := u.flush.Flush(); err != nil {
			return 0, err
		}
	}
	return u.c.Read(p)
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
