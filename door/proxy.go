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

	"github.com/postern-dev/postern/door/event"
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

// aLongTimeAgo is a deadline in the past, to unblock a read.
var aLongTimeAgo = time.Unix(1, 0)

// serveProxy serves one explicit-proxy connection: CONNECT, or absolute-URI
// HTTP requests with keep-alive, each request judged on its own.
func (d *Door) serveProxy(ctx context.Context, c net.Conn) {
	cr := newClientReader(ctx, c)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(cr)
	s := newSession(ctx, d, c, cr, br, nil)
	req := s.serve()
	if req == nil {
		putReader(br)
		return
	}
	pre, _ := br.Peek(br.Buffered())
	pre = slices.Clone(pre)
	putReader(br)
	d.handleConnect(ctx, c, req, pre, s.as)
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
	n      int64 // bytes read
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
	n, err := r.read(p)
	r.n += int64(n)
	return n, err
}

func (r *clientReader) read(p []byte) (int, error) {
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

func isClosedOrTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && ne.Timeout())
}

// connectEstablished is the whole answer to an admitted CONNECT, written in
// one call.
var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")

// handleConnect judges a CONNECT and, if admitted, tunnels it. pre are bytes
// the client sent after the request head.
func (d *Door) handleConnect(ctx context.Context, c net.Conn, req *http.Request, pre []byte, as *Client) {
	id := d.connID.Add(1)
	start := time.Now()
	host, port, err := policy.SplitTarget(req.RequestURI, 443)
	if err != nil {
		j := Judgement{Host: policy.Host{Name: req.RequestURI}, Port: 0, as: as,
			Decision: policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("bad connect target %q: %v", req.RequestURI, err)}}
		d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, fmt.Sprintf("postern door denied CONNECT %s\nreason: %s\nwrite the target as host:port, e.g. CONNECT example.com:443\n", req.RequestURI, j.Decision.Reason), true)
		return
	}
	if d.cfg.Upstream != nil {
		d.connectUpstream(ctx, c, id, start, host, port, pre)
		return
	}
	j := d.decideFor(ctx, as, host, port)
	what := "CONNECT " + targetString(host, port)
	if !j.Allowed() {
		d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, d.denyText(what, j), true)
		return
	}
	up, addr, err := d.dialJudged(ctx, j)
	j.Addr = addr
	if err != nil {
		d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
		writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", what, err), true)
		d.emitEnd(id, event.Connect, j, 0, 0, start, "dial failed: "+err.Error())
		return
	}
	d.track(up)
	defer d.untrack(up)
	// The client waits for the 200; the decision is recorded right after it
	// goes out, before any of the client's bytes are read.
	_, werr := c.Write(connectEstablished)
	d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
	if werr != nil {
		d.emitEnd(id, event.Connect, j, 0, 0, start, "client went away")
		return
	}
	upN, downN, denied := d.pipe(c, up, pre, func(fb firstBytes, herr error) bool {
		return d.judgeHead(id, "connect", c, j, fb, herr, headRules{inspected: d.inspectsName(j.Host)})
	}, func(head []byte) (int64, int64) {
		return d.servePinnedHTTP(ctx, c, up, addr, j, id, "connect", head)
	}, d.inspectTLS(ctx, c, up, addr, j, id, "connect"))
	reason := "closed"
	if denied {
		reason = "refused on first bytes"
	}
	d.emitEnd(id, event.Connect, j, upN, downN, start, reason)
}

// judgeHead checks a connection's first bytes and records a refusal. It
// reports whether the connection must be refused (never in observe mode).
func (d *Door) judgeHead(id uint64, kind event.Kind, c net.Conn, j Judgement, fb firstBytes, herr error, rules headRules) bool {
	reason := d.checkHead(j, fb, herr, rules)
	if reason == "" {
		return false
	}
	hj := j
	hj.Decision = policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: j.Decision.Rule}
	if d.policyOf(j).Mode == policy.Observe {
		hj.Decision.Verdict = policy.Allow
		hj.Decision.WouldDeny = true
	}
	d.emit(d.decisionEvent(id, kind, c.RemoteAddr(), hj))
	return hj.Decision.Verdict == policy.Deny
}

func (d *Door) emitEnd(id uint64, kind event.Kind, j Judgement, up, down int64, start time.Time, reason string) {
	ev := Event{
		Event:      event.Ended,
		Conn:       id,
		Kind:       kind,
		Host:       hostString(j.Host),
		Port:       j.Port,
		Decision:   decisionOf(j.Decision.Verdict),
		Reason:     reason,
		BytesUp:    up,
		BytesDown:  down,
		DurationMS: time.Since(start).Milliseconds(),
	}
	if j.Addr.IsValid() {
		ev.Addr = j.Addr.String()
	}
	if j.as != nil {
		ev.Client = j.as.Name
		ev.Mode = j.as.Policy.Mode.String()
	}
	d.emit(ev)
}

// servePinnedHTTP serves plain HTTP on a connection admitted for j (a CONNECT
// tunnel, or a redirected connection), whose upstream up is connected to
// addr: request by request, each held to j's host. head is what the client
// has sent so far. It returns the bytes moved each way.
func (d *Door) servePinnedHTTP(ctx context.Context, c, up net.Conn, addr netip.Addr, j Judgement, id uint64, kind event.Kind, head []byte) (int64, int64) {
	d.forget(up) // the Transport's from now on, or closed by release
	cr := newClientReader(ctx, c)
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(io.MultiReader(bytes.NewReader(head), cr))
	// The address already dialled goes first, so that the Transport's first
	// dial takes the connection made to it.
	j.Addrs = append([]netip.Addr{addr}, slices.DeleteFunc(slices.Clone(j.Addrs), func(a netip.Addr) bool { return a == addr })...)
	p := &pin{j: j, id: id, kind: kind, pre: &forwardCtx{pre: up, preAddr: addr}}
	s := newSession(ctx, d, c, cr, br, p)
	s.as = j.as
	s.serve()
	if p.pre != nil {
		p.pre.release()
	}
	putReader(br)
	up0, down0 := s.counts()
	return up0 + int64(len(head)), down0
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

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
