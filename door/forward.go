package door

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// Plain HTTP goes through the door request by request. An httpSession reads
// one request at a time from a client connection (bytes checked against RFC
// 9112 before net/http parses them), judges exactly what will be sent, hands
// the request to an http.Transport of the connection's own, whose only dial
// connects to the addresses that judgement checked, and writes the response
// back framed for this client. Data flows one way through each step: the
// client's bytes through http.ReadRequest into the Transport, the upstream's
// through the Transport's response body into a copy loop that owns its
// buffer and writes to the client's bufio.Writer, which nothing else
// touches. The Transport keeps the upstream connections, keyed by the judged
// address itself, for as long as the client's connection lasts.

// forwardKey is the context key under which a request carries its judgement
// to the Transport's dial.
type forwardKey struct{}

// forwardCtx is what the Transport's dial may connect to for one request: the
// judged addresses, and possibly a connection already made to one of them
// (a tunnel's, a redirected connection's), handed to the first dial of its
// address.
type forwardCtx struct {
	j Judgement

	mu      sync.Mutex
	pre     net.Conn
	preAddr netip.Addr
}

// take returns the connection already made to a, once.
func (f *forwardCtx) take(a netip.Addr) net.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pre == nil || f.preAddr != a {
		return nil
	}
	c := f.pre
	f.pre = nil
	return c
}

// release closes the connection made beforehand if no dial took it.
func (f *forwardCtx) release() {
	f.mu.Lock()
	c := f.pre
	f.pre = nil
	f.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// errNotJudged is a dial the Transport asked for that no judgement covers.
var errNotJudged = errors.New("the door dials only addresses it has judged")

// newTransport is an upstream HTTP client for one client connection. Its dial connects only to
// the addresses the request's judgement checked; it never uses a proxy from
// the environment, never asks for compression (bytes pass as the server sent
// them), and speaks only HTTP/1.1.
func (d *Door) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.dialForward,
		DisableCompression:     true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		WriteBufferSize:        16 << 10,
		ReadBufferSize:         16 << 10,
	}
}

// dialForward is the Transport's dial: addr must be one of the addresses the
// request's judgement checked, on its port. It is tried first, then the
// judgement's other addresses.
func (d *Door) dialForward(ctx context.Context, _, addr string) (net.Conn, error) {
	fc, _ := ctx.Value(forwardKey{}).(*forwardCtx)
	if fc == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, errNotJudged)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() != fc.j.Port || !slices.Contains(fc.j.Addrs, ap.Addr()) {
		return nil, fmt.Errorf("dial %s for %s: %w", addr, targetString(fc.j.Host, fc.j.Port), errNotJudged)
	}
	if c := fc.take(ap.Addr()); c != nil {
		return c, nil
	}
	j := fc.j
	j.Addrs = append([]netip.Addr{ap.Addr()}, slices.DeleteFunc(slices.Clone(fc.j.Addrs), func(a netip.Addr) bool { return a == ap.Addr() })...)
	c, _, err := d.dialJudged(ctx, j)
	return c, err
}

// headFacts is what the raw bytes of a request head say that net/http's
// parsed request no longer shows.
type headFacts struct {
	// closeAfter: the head had both Content-Length and Transfer-Encoding
	// (RFC 9112 6.3: the connection must close after the response).
	closeAfter bool
	// host is the Host header's value as sent; hasHost whether there was one.
	host    string
	hasHost bool
}

// errHeadSyntax is a request head RFC 9112 says a server must refuse.
var errHeadSyntax = errors.New("malformed request head")

// checkRequestHead reads a raw request head (request line to the blank line)
// for what RFC 9112 requires of a server that net/http's parser lets by:
// whitespace between a field name and its colon is refused (5.1), and
// Content-Length beside Transfer-Encoding closes the connection (6.3).
func checkRequestHead(head []byte) (headFacts, error) {
	var f headFacts
	lines := bytes.Split(head, []byte("\n"))
	var cl, te bool
	for _, l := range lines[1:] {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) == 0 {
			break
		}
		if l[0] == ' ' || l[0] == '\t' {
			continue // a folded line continues the field before it
		}
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue // net/http refuses it
		}
		if i := bytes.IndexAny(name, " \t"); i >= 0 {
			return f, fmt.Errorf("%w: whitespace between the header field name %q and its colon", errHeadSyntax, name[:i])
		}
		switch {
		case asciiEqualFold(name, "content-length"):
			cl = true
		case asciiEqualFold(name, "transfer-encoding"):
			te = true
		case asciiEqualFold(name, "host"):
			if !f.hasHost {
				f.host, f.hasHost = string(bytes.TrimSpace(value)), true
			}
		}
	}
	f.closeAfter = cl && te
	return f, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// httpSession serves plain HTTP/1.x on one client connection: absolute-URI
// requests on the explicit proxy (each judged on its own), or the requests on
// a connection admitted for one host (pin set: each must name that host).
type httpSession struct {
	d   *Door
	ctx context.Context // done when the door starts draining
	c   net.Conn
	cr  *clientReader
	br  *bufio.Reader
	out *countWriter // under bw: bytes written to the client
	bw  *bufio.Writer
	pin *pin
	// as is the gateway client the connection belongs to, once a request
	// named it (see Config.Authenticate).
	as *Client
	// kept carries this connection's requests without a body upstream, tr
	// those with one; each is made at the first such request, and closed
	// when the session ends, so an upstream connection lives no longer than
	// the client's that used it.
	kept *keptConn
	tr   *http.Transport
	// Bytes relayed after protocol switches on a pinned connection, which
	// do not pass through cr and bw.
	upgradedUp, upgradedDown int64
}

// pin is the host a connection was admitted for, and how it is recorded.
type pin struct {
	j    Judgement
	id   uint64
	kind event.Kind
	// pre is the upstream connection already made for the connection, given
	// to the Transport's first dial of its address.
	pre *forwardCtx
}

// sessionWriterSize is the buffer responses are written to the client through.
const sessionWriterSize = 32 << 10

func newSession(ctx context.Context, d *Door, c net.Conn, cr *clientReader, br *bufio.Reader, p *pin) *httpSession {
	out := &countWriter{w: c}
	return &httpSession{d: d, ctx: ctx, c: c, cr: cr, br: br, out: out, bw: bufio.NewWriterSize(out, sessionWriterSize), pin: p}
}

// counts are the bytes read from and written to the client so far.
func (s *httpSession) counts() (up, down int64) {
	return s.cr.n + s.upgradedUp, s.out.n + s.upgradedDown
}

// serve reads and forwards requests until the connection ends. It returns a
// CONNECT request for the caller to tunnel (explicit proxy only), else nil.
func (s *httpSession) serve() *http.Request {
	defer func() {
		s.dropKept()
		if s.tr != nil {
			s.tr.CloseIdleConnections()
		}
	}()
	for {
		s.cr.awaitHead(time.Now().Add(proxyIdleTimeout))
		stopWatch := context.AfterFunc(s.ctx, func() { s.c.SetReadDeadline(aLongTimeAgo) })
		head, err := peekHead(s.br)
		var (
			facts headFacts
			req   *http.Request
		)
		if err == nil {
			facts, err = checkRequestHead(head)
		}
		if err == nil {
			req, err = http.ReadRequest(s.br)
		}
		stopped := stopWatch()
		if err != nil {
			if !errors.Is(err, io.EOF) && !isClosedOrTimeout(err) && stopped {
				s.refuse(err)
			}
			return nil
		}
		if !stopped {
			return nil // draining: no new requests
		}
		s.cr.headDone()
		if s.d.cfg.Authenticate != nil && s.pin == nil && !s.authenticate(req) {
			return nil
		}
		if req.Method == http.MethodConnect && s.pin == nil {
			return req
		}
		if !s.one(req, facts) {
			return nil
		}
	}
}

// refuse answers a request the door cannot read, and records it.
func (s *httpSession) refuse(err error) {
	d := s.d
	id := d.connID.Add(1)
	reason := fmt.Sprintf("unreadable request: %v", err)
	kind := event.HTTP
	j := Judgement{Decision: policy.Decision{Verdict: policy.Deny, Reason: reason}, as: s.as}
	if s.pin != nil {
		id, kind = s.pin.id, s.pin.kind
		j.Host, j.Port = s.pin.j.Host, s.pin.j.Port
	}
	d.emit(d.decisionEvent(id, kind, s.c.RemoteAddr(), j))
	code, status := 400, "Bad Request"
	if errors.Is(err, errHeadTooBig) {
		code, status = 431, "Request Header Fields Too Large"
	}
	s.status(code, status, fmt.Sprintf("postern door could not read the request: %v\nsend CONNECT host:port or an absolute-URI request (GET http://host/path HTTP/1.1)\n", err), true,
		"X-Postern-Decision: "+decisionHeader(reason))
}

// status writes a whole plain-text response through the session's writer.
func (s *httpSession) status(code int, status, text string, closeAfter bool, extra ...string) {
	writeStatus(s.bw, code, status, text, closeAfter, extra...)
	s.bw.Flush()
}

func (s *httpSession) denied(reason, text string, closeAfter bool) {
	s.status(403, "Forbidden", text, closeAfter, "X-Postern-Decision: "+decisionHeader(reason))
}

// one judges and forwards one request; false means the connection must close.
func (s *httpSession) one(req *http.Request, facts headFacts) bool {
	if s.pin != nil {
		return s.onePinned(req, facts)
	}
	d := s.d
	id := d.connID.Add(1)
	start := time.Now()
	up0, down0 := s.counts()
	// A body the door does not forward is not read: the connection closes.
	closeAfter := req.Close || req.ContentLength != 0 || facts.closeAfter
	remote := s.c.RemoteAddr()

	if req.URL.Scheme == "" || req.URL.Host == "" {
		s.status(400, "Bad Request", fmt.Sprintf("postern door is a proxy: send an absolute URI (GET http://host/path) or CONNECT host:port, not %q\n", req.RequestURI), true)
		return false
	}
	if !strings.EqualFold(req.URL.Scheme, "http") {
		s.status(400, "Bad Request", fmt.Sprintf("postern door forwards only http:// requests; for %s use CONNECT %s\n", req.URL.Scheme, req.URL.Host), true)
		return false
	}
	host, port, err := policy.SplitTarget(req.URL.Host, 80)
	what := req.Method + " " + req.URL.String()
	if err != nil {
		j := Judgement{Host: policy.Host{Name: req.URL.Host}, as: s.as, Decision: policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("bad request host %q: %v", req.URL.Host, err)}}
		d.emit(d.decisionEvent(id, event.HTTP, remote, j))
		s.denied(j.Decision.Reason, d.headDenyText(what, j, j.Decision.Reason), true)
		return false
	}
	if facts.hasHost {
		hhost, _, herr := policy.SplitTarget(facts.host, port)
		if herr != nil || !sameHost(hhost, host) {
			j := Judgement{Host: host, Port: port, as: s.as, Decision: policy.Decision{Verdict: policy.Deny,
				Reason: fmt.Sprintf("http host %s does not match request target %s", facts.host, hostString(host))}}
			d.emit(d.decisionEvent(id, event.HTTP, remote, j))
			s.denied(j.Decision.Reason, d.headDenyText(what, j, j.Decision.Reason), true)
			return false
		}
	}
	if d.cfg.Upstream != nil {
		return s.oneUpstream(req, facts, host, port, id, start)
	}
	j := d.decideFor(s.ctx, s.as, host, port)
	if !j.Allowed() {
		d.emit(d.decisionEvent(id, event.HTTP, remote, j))
		s.denied(j.Decision.Reason, d.denyText(what, j), closeAfter)
		return !closeAfter
	}
	if s.refusedByInspect(req, j, req.URL.Host, id, "http", closeAfter) {
		return !closeAfter
	}
	emitted := false
	emitDecision := func(addr netip.Addr) {
		if emitted {
			return
		}
		emitted = true
		j.Addr = addr
		d.emit(d.decisionEvent(id, event.HTTP, remote, j))
	}
	// What goes upstream names the host the URI named, as it was judged.
	res := s.forward(req, facts, j, req.URL.Host, nil, emitDecision)
	emitDecision(res.addr)
	s.upgradedUp += res.upgradedUp
	s.upgradedDown += res.upgradedDown
	up1, down1 := s.counts()
	d.emitEnd(id, event.HTTP, j, up1-up0, down1-down0, start, res.reason)
	return res.keep
}

// onePinned checks one request on a connection admitted for one host, then
// forwards it to that host.
func (s *httpSession) onePinned(req *http.Request, facts headFacts) bool {
	p := s.pin
	j := p.j
	what := req.Method + " " + req.RequestURI
	if req.Method == http.MethodConnect {
		s.status(400, "Bad Request", fmt.Sprintf("postern door: CONNECT is for the door itself, not for a connection already admitted to %s\n", targetString(j.Host, j.Port)), true)
		return false
	}
	// Judge exactly what will be sent: a URI's authority (which net/http
	// would send as the Host) and the Host header must both name the host.
	authority := req.Host
	if req.URL.IsAbs() || req.URL.Host != "" {
		if !strings.EqualFold(req.URL.Scheme, "http") {
			reason := fmt.Sprintf("request target %s is not an http:// uri", req.RequestURI)
			s.refusePinned(what, j, reason)
			return false
		}
		authority = req.URL.Host
	}
	for _, name := range []string{authority, facts.host} {
		if name == "" {
			continue
		}
		if s.pinDenies(what, j, name) {
			return false
		}
	}
	if s.refusedByInspect(req, j, authority, p.id, p.kind, req.Close || req.ContentLength != 0 || facts.closeAfter) {
		return !(req.Close || req.ContentLength != 0 || facts.closeAfter)
	}
	if authority == "" {
		authority = targetString(j.Host, j.Port) // an HTTP/1.0 request with no Host
		if j.Port == 80 {
			authority = hostString(j.Host)
			if j.Host.Addr.Is6() {
				authority = "[" + authority + "]"
			}
		}
	}
	res := s.forward(req, facts, j, authority, p.pre, nil)
	p.pre = nil
	s.upgradedUp += res.upgradedUp
	s.upgradedDown += res.upgradedDown
	return res.keep
}

// pinDenies holds one name a pinned request carries against the admitted host;
// a mismatch is refused (unless in observe mode) and recorded.
func (s *httpSession) pinDenies(what string, j Judgement, name string) bool {
	fb := firstBytes{kind: headHTTP, name: name}
	if !s.d.judgeHead(s.pin.id, s.pin.kind, s.c, j, fb, nil, headRules{}) {
		return false
	}
	reason := s.d.checkHead(j, fb, nil, headRules{})
	s.denied(reason, s.d.headDenyText(what, j, reason), true)
	return true
}

// refusePinned refuses a request on a pinned connection for reason.
func (s *httpSession) refusePinned(what string, j Judgement, reason string) {
	hj := j
	hj.Decision = policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: j.Decision.Rule}
	s.d.emit(s.d.decisionEvent(s.pin.id, s.pin.kind, s.c.RemoteAddr(), hj))
	s.denied(reason, s.d.headDenyText(what, j, reason), true)
}

// forwarded is how one forwarded request ended.
type forwarded struct {
	keep   bool       // the client connection may carry another request
	reason string     // for the end event
	addr   netip.Addr // the upstream address used, if one was
	// Bytes relayed after a protocol switch (not written through bw).
	upgradedUp, upgradedDown int64
}

// forward sends req, judged as j, to the host as authority, and writes the
// response back. gotConn, if set, is called with the upstream address once a
// connection is had, before any byte of the request goes out.
//
// A request with no body goes out on the session's kept upstream connection,
// written by net/http's Request.Write and answered through
// http.ReadResponse, in this goroutine: most requests are such, and for them
// the Transport's two goroutines per connection and the hand-offs between
// them cost a third of the door's keep-alive throughput (docs/BENCHMARKS.md).
// A request with a body goes through the Transport, which writes the body
// while it reads the response (a server may answer before the body ends) and
// waits for 100 Continue when asked to.
func (s *httpSession) forward(req *http.Request, facts headFacts, j Judgement, authority string, pre *forwardCtx, gotConn func(netip.Addr)) forwarded {
	out, upgrade := outgoing(req, j, authority)
	if req.ContentLength == 0 {
		return s.forwardKept(req, out, upgrade, facts, j, pre, gotConn)
	}
	return s.forwardTransport(req, out, upgrade, facts, j, pre, gotConn)
}

// outgoing is the request the door sends for req: to the judged address,
// naming authority as its Host, without hop-by-hop headers. upgrade is the
// protocol the client asked to switch to, if any the door allows.
func outgoing(req *http.Request, j Judgement, authority string) (*http.Request, string) {
	trailers := httpguts.HeaderValuesContainsToken(req.Header["Te"], "trailers")
	out := new(http.Request)
	*out = *req
	out.URL = upstreamURL(req, netip.AddrPortFrom(j.Addrs[0], j.Port))
	out.Host = authority
	out.RequestURI = ""
	out.Close = false
	upgrade := removeHopHeaders(out.Header)
	if strings.EqualFold(upgrade, "h2c") {
		upgrade = "" // HTTP/2 would carry requests for any authority: stay on HTTP/1.1
	}
	if upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upgrade)
	}
	if trailers {
		out.Header.Set("Te", "trailers")
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // send none, as the client sent none
	}
	return out, upgrade
}

// keptConn is the session's own upstream connection for requests without a
// body.
type keptConn struct {
	c    net.Conn
	addr netip.AddrPort
	br   *bufio.Reader
	bw   *bufio.Writer
	// used: it has carried a whole exchange, so the server may have closed
	// it while it waited for the next.
	used bool
}

// keptFor returns the kept connection if it leads to an address j checked,
// else a new one: the connection made beforehand for a pinned session, or a
// dial of j's addresses.
func (s *httpSession) keptFor(j Judgement, pre *forwardCtx) (*keptConn, error) {
	if kc := s.kept; kc != nil {
		if kc.addr.Port() == j.Port && slices.Contains(j.Addrs, kc.addr.Addr()) {
			return kc, nil
		}
		s.dropKept()
	}
	var (
		c    net.Conn
		addr netip.Addr
	)
	if pre != nil {
		c = pre.take(j.Addrs[0])
		addr = j.Addrs[0]
	}
	if c == nil {
		var err error
		c, addr, err = s.d.dialJudged(s.d.hardCtx(), j)
		if err != nil {
			return nil, err
		}
	}
	s.d.track(c)
	kc := &keptConn{c: c, addr: netip.AddrPortFrom(addr, j.Port), br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 4<<10)}
	s.kept = kc
	return kc, nil
}

// dropKept closes the kept connection.
func (s *httpSession) dropKept() {
	if s.kept != nil {
		s.d.untrack(s.kept.c)
		s.kept = nil
	}
}

// replayable says whether a request may be sent again on a new connection
// after the kept one turned out closed, as net/http's Transport does: no
// body, and a safe method or an idempotency key.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// closedWhileIdle says whether err is what a kept connection the server
// closed while idle gives: an end before any byte of a response, or a reset.
func closedWhileIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (s *httpSession) forwardKept(req, out *http.Request, upgrade string, facts headFacts, j Judgement, pre *forwardCtx, gotConn func(netip.Addr)) forwarded {
	var res forwarded
	client10 := !req.ProtoAtLeast(1, 1)
	target := targetString(j.Host, j.Port)
	for attempt := 0; ; attempt++ {
		kc, err := s.keptFor(j, pre)
		if err != nil {
			res.addr = j.Addrs[0]
			res.reason = "dial failed: " + err.Error()
			s.status(502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", target, err), true)
			return res
		}
		res.addr = kc.addr.Addr()
		if gotConn != nil {
			gotConn(res.addr)
		}
		reused := kc.used
		err = out.Write(kc.bw)
		if err == nil {
			err = kc.bw.Flush()
		}
		var (
			resp    *http.Response
			interim bool
		)
		if err == nil {
			// A kept connection the server closed while idle gives an end
			// before any byte of a response.
			_, err = kc.br.Peek(1)
		}
		for err == nil {
			resp, err = http.ReadResponse(kc.br, out)
			if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
				break
			}
			interim = true
			if !client10 {
				s.bw.WriteString("HTTP/1.1 ")
				s.bw.WriteString(resp.Status)
				s.bw.WriteString("\r\n")
				resp.Header.Write(s.bw)
				s.bw.WriteString("\r\n")
				if ferr := s.bw.Flush(); ferr != nil {
					s.dropKept()
					res.reason = "client went away"
					return res
				}
			}
		}
		if err != nil {
			s.dropKept()
			if reused && attempt == 0 && !interim && replayable(req) && closedWhileIdle(err) {
				continue
			}
			res.reason = "bad upstream response"
			s.status(502, "Bad Gateway", fmt.Sprintf("postern door: upstream %s gave no valid response: %v\n", target, err), true)
			return res
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			kc := s.kept
			s.kept = nil
			defer s.d.untrack(kc.c)
			upc := struct {
				io.Reader
				io.Writer
				io.Closer
			}{kc.br, kc.c, kc.c}
			return s.switchProtocols(resp, upc, kc.c, upgrade, res)
		}
		keep, reason := s.writeResponse(req, resp, facts)
		if !keep || resp.Close {
			s.dropKept()
		} else {
			kc.used = true
		}
		res.keep, res.reason = keep, reason
		return res
	}
}

func (s *httpSession) forwardTransport(req, out *http.Request, upgrade string, facts headFacts, j Judgement, pre *forwardCtx, gotConn func(netip.Addr)) forwarded {
	fc := pre
	if fc == nil {
		fc = &forwardCtx{}
	}
	fc.j = j
	defer fc.release()
	ctx, cancel := context.WithCancel(context.WithValue(s.d.hardCtx(), forwardKey{}, fc))
	defer cancel()

	var res forwarded
	var traceMu sync.Mutex
	done := false
	client10 := !req.ProtoAtLeast(1, 1)
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if ap, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String()); err == nil {
				res.addr = ap.Addr().Unmap()
			} else {
				res.addr = j.Addrs[0]
			}
			if gotConn != nil {
				gotConn(res.addr)
			}
		},
		// An interim response (100 Continue, 103 Early Hints) goes on to the
		// client at once; never to an HTTP/1.0 client (RFC 9110 15.2).
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			traceMu.Lock()
			defer traceMu.Unlock()
			if done || client10 {
				return nil
			}
			fmt.Fprintf(s.bw, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
			http.Header(h).Write(s.bw)
			s.bw.WriteString("\r\n")
			return s.bw.Flush()
		},
	}
	out = out.WithContext(httptrace.WithClientTrace(ctx, trace))
	body := &clientBody{r: req.Body}
	out.Body = body
	// After the exchange, a body the Transport did not read to its end is
	// abandoned: no read of the client's connection may outlive this call.
	bodyDone := func() bool { return body.abandon(s.c) }

	if s.tr == nil {
		s.tr = s.d.newTransport()
	}
	resp, err := s.tr.RoundTrip(out)
	traceMu.Lock()
	done = true
	traceMu.Unlock()
	if err != nil {
		bodyDone()
		target := targetString(j.Host, j.Port)
		if !res.addr.IsValid() {
			res.addr = j.Addrs[0]
			res.reason = "dial failed: " + err.Error()
			s.status(502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", target, err), true)
			return res
		}
		res.reason = "bad upstream response"
		s.status(502, "Bad Gateway", fmt.Sprintf("postern door: upstream %s gave no valid response: %v\n", target, err), true)
		return res
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		upc, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			resp.Body.Close()
			bodyDone()
			res.reason = "bad upstream response"
			s.status(502, "Bad Gateway", "postern door: upstream switched protocols on a connection it cannot hand over\n", true)
			return res
		}
		defer upc.Close()
		if !bodyDone() {
			res.reason = "request body unfinished at a protocol switch"
			return res
		}
		return s.switchProtocols(resp, upc, upc, upgrade, res)
	}
	keep, reason := s.writeResponse(req, resp, facts)
	resp.Body.Close()
	if !bodyDone() {
		keep = false
	}
	res.keep, res.reason = keep, reason
	return res
}

// upstreamURL is req's target as the Transport sends it: to the judged address
// ap, with the path and query exactly as the client wrote them.
func upstreamURL(req *http.Request, ap netip.AddrPort) *url.URL {
	u := &url.URL{Scheme: "http", Host: ap.String()}
	target := req.RequestURI
	if i := strings.Index(target, "://"); i >= 0 && !strings.HasPrefix(target, "/") {
		target = target[i+3:]
		if j := strings.IndexAny(target, "/?"); j >= 0 {
			target = target[j:]
		} else {
			target = ""
		}
	}
	path, query, hasQuery := strings.Cut(target, "?")
	switch {
	case path == "" || path == "*" && req.Method != http.MethodOptions:
		u.Path = "/"
	case strings.HasPrefix(path, "//"):
		// An Opaque starting with // would be sent with the scheme before it.
		u.Path, u.RawPath = req.URL.Path, req.URL.RawPath
	default:
		u.Opaque = path
	}
	u.RawQuery = query
	u.ForceQuery = hasQuery && query == ""
	return u
}

// writeResponse writes an upstream response to the client, framed for it:
// Content-Length when the server gave one; otherwise chunked to an HTTP/1.1
// client and, to an HTTP/1.0 client, the body ended by closing the connection
// (RFC 9112 6.1: chunked is never sent to 1.0). It reports whether the
// connection may carry another request.
func (s *httpSession) writeResponse(req *http.Request, resp *http.Response, facts headFacts) (keep bool, reason string) {
	removeHopHeaders(resp.Header)
	client10 := !req.ProtoAtLeast(1, 1)
	noBody := req.Method == http.MethodHead || resp.StatusCode == 204 || resp.StatusCode == 304 || resp.StatusCode < 200
	keep = !req.Close && !facts.closeAfter
	chunked := false
	h := resp.Header
	switch {
	case resp.StatusCode == 204 || resp.StatusCode < 200:
		h.Del("Content-Length")
	case noBody:
		// HEAD and 304 pass the server's Content-Length on as it was.
	case resp.ContentLength >= 0:
		h.Set("Content-Length", fmt.Sprint(resp.ContentLength))
	case client10:
		keep = false
	default:
		chunked = true
	}
	var trailerKeys []string
	if chunked {
		for k := range resp.Trailer {
			trailerKeys = append(trailerKeys, k)
		}
		slices.Sort(trailerKeys)
	}

	bw := s.bw
	status := resp.Status
	if !strings.HasPrefix(status, fmt.Sprint(resp.StatusCode)) {
		status = fmt.Sprintf("%03d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(status)
	bw.WriteString("\r\n")
	h.WriteSubset(bw, framingHeaders)
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(trailerKeys) > 0 {
			fmt.Fprintf(bw, "Trailer: %s\r\n", strings.Join(trailerKeys, ", "))
		}
	}
	switch {
	case !keep:
		bw.WriteString("Connection: close\r\n")
	case client10:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
	if noBody {
		if err := bw.Flush(); err != nil {
			return false, "client went away"
		}
		return keep, "response complete"
	}

	var dst io.Writer = bw
	var cw io.WriteCloser
	if chunked {
		cw = httputil.NewChunkedWriter(bw)
		dst = cw
	}
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false, "client went away"
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			// The server's body broke off: the client sees it end short (a
			// Content-Length not met, a chunked body never terminated).
			bw.Flush()
			return false, "upstream response broke off: " + rerr.Error()
		}
		// A short read is what had arrived: pass it on now, so a streamed
		// response (server-sent events, a long poll) is not held back.
		if n < len(buf) {
			if err := bw.Flush(); err != nil {
				return false, "client went away"
			}
		}
	}
	if chunked {
		cw.Close() // the last chunk: "0\r\n"
		for _, k := range trailerKeys {
			for _, v := range resp.Trailer[k] {
				fmt.Fprintf(bw, "%s: %s\r\n", k, headerValue(v))
			}
		}
		bw.WriteString("\r\n")
	}
	if err := bw.Flush(); err != nil {
		return false, "client went away"
	}
	if keep {
		return true, "response complete"
	}
	return false, "closed"
}

// framingHeaders are the response headers the door writes itself.
var framingHeaders = map[string]bool{
	"Transfer-Encoding": true, "Connection": true, "Trailer": true, "Keep-Alive": true,
}

// headerValue is v with line breaks made spaces, as net/http writes values.
func headerValue(v string) string {
	return strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(strings.TrimSpace(v))
}

// switchProtocols completes a 101 upgrade the client asked for (asked) and
// relays raw bytes both ways until either side ends. upc reads and writes the
// upstream connection (what the server sent after its 101 comes first); half
// is what can be half-closed of it.
func (s *httpSession) switchProtocols(resp *http.Response, upc io.ReadWriter, half any, asked string, res forwarded) forwarded {
	res.keep = false
	to := removeHopHeaders(resp.Header)
	if asked == "" || !strings.EqualFold(to, asked) {
		res.reason = "bad upstream response"
		s.status(502, "Bad Gateway", fmt.Sprintf("postern door: upstream switched protocols to %q when %q was asked for\n", to, asked), true)
		return res
	}
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", to)
	bw := s.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(resp.Status)
	bw.WriteString("\r\n")
	resp.Header.Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		res.reason = "client went away"
		return res
	}
	// What the client sent after its request head is the new protocol's.
	if n := s.br.Buffered(); n > 0 {
		b, _ := s.br.Peek(n)
		w, err := upc.Write(b)
		res.upgradedUp += int64(w)
		if err != nil {
			res.reason = "upgraded connection closed"
			return res
		}
		s.br.Discard(n)
	}
	downc := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(s.c, upc)
		closeWrite(s.c)
		downc <- n
	}()
	n, _ := io.Copy(upc, s.c)
	res.upgradedUp += n
	if cw, ok := half.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else if c, ok := half.(io.Closer); ok {
		c.Close()
	}
	res.upgradedDown += <-downc
	res.reason = "upgraded connection closed"
	return res
}

// clientBody is a request body the Transport reads from the client's
// connection. Closing it does nothing (the Transport closes bodies it is done
// with; draining an unread upload there could take forever); the session
// abandons it once the exchange is over.
type clientBody struct {
	mu     sync.Mutex
	r      io.ReadCloser
	eof    bool
	closed bool
}

// errBodyAbandoned is a read of a request body after its exchange ended.
var errBodyAbandoned = errors.New("request body read after its exchange ended")

func (b *clientBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyAbandoned
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *clientBody) Close() error { return nil }

// abandon ends every use of the body, unblocking a read in flight by the
// client connection's deadline, and reports whether the body had been read to
// its end (else the connection cannot carry another request).
func (b *clientBody) abandon(c net.Conn) bool {
	if !b.mu.TryLock() {
		c.SetReadDeadline(aLongTimeAgo)
		b.mu.Lock()
	}
	b.closed = true
	eof := b.eof
	b.mu.Unlock()
	return eof
}
