package door

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

const (
	// inspectHandshakeTimeout bounds the client's TLS handshake with the door.
	inspectHandshakeTimeout = 10 * time.Second
	// upstreamHandshakeTimeout bounds the door's TLS handshake with an
	// inspected host.
	upstreamHandshakeTimeout = 10 * time.Second
)

var (
	// errClientCertAsked is an inspected host asking the door for a client
	// certificate.
	errClientCertAsked = errors.New("upstream asked for a client certificate")
	// errEncodedBody is a response whose encoding the door cannot read to
	// remove injected values from it.
	errEncodedBody = errors.New("response body in an encoding the door cannot read")
)

// discardLog is where net/http's own error lines go: a request's failure is
// recorded as an event, and nothing of a request may reach a log.
var discardLog = log.New(io.Discard, "", 0)

// inspectClientConn is a client connection handed to TLS: the bytes already
// read (the ClientHello) first, then the connection's, counted each way.
type inspectClientConn struct {
	net.Conn
	name     string // the inspected host
	pre      []byte
	up, down atomic.Int64
	// certSent: the handshake got as far as the door's certificate, so
	// a failure after it is the client's answer to it.
	certSent atomic.Bool
}

func (c *inspectClientConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		c.up.Add(int64(n))
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.up.Add(int64(n))
	return n, err
}

func (c *inspectClientConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n))
	return n, err
}

// serveInspected serves a connection admitted as j whose first bytes, head,
// are a TLS ClientHello for the inspected host name: the door completes the
// handshake as name, then serves its requests one by one until it ends. up
// is the upstream connection already made to addr, used by the first
// request that needs one. It returns the bytes moved each way on the
// client's side.
func (d *Door) serveInspected(ctx context.Context, c, up net.Conn, addr netip.Addr, j Judgement, id uint64, kind event.Kind, name string, rule *policy.InspectRule, head []byte) (int64, int64) {
	d.forget(up) // the Transport's from now on, or closed by release
	pre := &forwardCtx{j: j, pre: up, preAddr: addr}
	defer pre.release()
	cc := &inspectClientConn{Conn: c, name: name, pre: head}
	tc := tls.Server(cc, d.insp.tls)
	hctx, cancel := context.WithTimeout(ctx, inspectHandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		hj := j
		hj.Decision = policy.Decision{Verdict: policy.Deny, Reason: clientHandshakeReason(name, err, cc.certSent.Load()), Rule: inspectRef(rule)}
		d.emit(d.decisionEvent(id, kind, c.RemoteAddr(), hj))
		return cc.up.Load(), cc.down.Load()
	}
	ic := d.newInspectedConn(j, id, name, rule, c.RemoteAddr(), pre)
	ic.serve(ctx, tc)
	return cc.up.Load(), cc.down.Load()
}

// clientHandshakeReason says why a client's handshake with the door failed.
// Once the door's certificate went out, a failure is the client's answer to
// it, whether it came as an alert (in TLS 1.3 encrypted under keys the
// client may already have dropped), a close or a reset.
func clientHandshakeReason(name string, err error, certSent bool) string {
	var oe *net.OpError
	// A TLS 1.3 client that rejects the certificate sends its alert before
	// it has handshake keys, which the door then cannot read.
	detail := "it ended the handshake on receiving it: " + err.Error()
	switch {
	case errors.As(err, &oe) && oe.Op == "remote error":
		detail = oe.Err.Error()
		certSent = true
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		detail = "it closed the connection on receiving it"
	}
	if certSent {
		return fmt.Sprintf("client refused the inspection certificate for %s (%s): it may pin its certificate; remove %s from inspect to splice it", name, detail, name)
	}
	return fmt.Sprintf("tls handshake with the client for %s failed before the door's certificate was sent: %v", name, err)
}

func inspectRef(r *policy.InspectRule) string {
	return `inspect "` + r.Host + `" (` + r.Pos + `)`
}

// inspectedConn serves the requests of one inspected client connection.
type inspectedConn struct {
	d      *Door
	j      Judgement
	id     uint64
	name   string
	rule   *policy.InspectRule
	client net.Addr
	// authority is the host (and port, when not 443) requests go upstream
	// for; target the dial address the Transport asks for.
	authority, target string
	inject            []injectedHeader
	scrub             *scrubber
	tr                *http.Transport
	rp                *httputil.ReverseProxy

	mu      sync.Mutex
	active  int
	closed  bool
	drained *sync.Cond
}

func (d *Door) newInspectedConn(j Judgement, id uint64, name string, rule *policy.InspectRule, client net.Addr, pre *forwardCtx) *inspectedConn {
	ic := &inspectedConn{d: d, j: j, id: id, name: name, rule: rule, client: client,
		inject: d.insp.inject[name], scrub: d.insp.scrub[name]}
	ic.drained = sync.NewCond(&ic.mu)
	ic.target = net.JoinHostPort(name, strconv.Itoa(int(j.Port)))
	ic.authority = name
	if j.Port != 443 {
		ic.authority = ic.target
	}
	ic.tr = &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			if addr != ic.target {
				return nil, fmt.Errorf("dial %s for %s: %w", addr, ic.target, errNotJudged)
			}
			if c := pre.take(pre.preAddr); c != nil {
				return c, nil
			}
			c, _, err := d.dialJudged(ctx, j)
			return c, err
		},
		TLSClientConfig: &tls.Config{
			ServerName: name,
			RootCAs:    d.insp.roots,
			MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return nil, errClientCertAsked
			},
		},
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    upstreamHandshakeTimeout,
		DisableCompression:     ic.scrub == nil,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	ic.rp = &httputil.ReverseProxy{
		Rewrite:        ic.rewrite,
		Transport:      ic.tr,
		ModifyResponse: ic.modifyResponse,
		ErrorHandler:   ic.upstreamError,
		ErrorLog:       discardLog,
		BufferPool:     proxyBufs{},
	}
	return ic
}

// proxyBufs lends ReverseProxy its copy buffers (32 KiB each, as it would
// allocate per request).
type proxyBufs struct{}

var proxyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (proxyBufs) Get() []byte  { return *proxyBufPool.Get().(*[]byte) }
func (proxyBufs) Put(b []byte) { proxyBufPool.Put(&b) }

// oneConn is a listener that yields one connection, then waits until it is
// closed.
type oneConn struct {
	c      net.Conn
	taken  atomic.Bool
	done   chan struct{}
	closer sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	if l.taken.CompareAndSwap(false, true) {
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.closer.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// serve serves tc until it closes (or the door's drain closes it).
func (ic *inspectedConn) serve(ctx context.Context, tc *tls.Conn) {
	l := &oneConn{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           ic,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       proxyIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          discardLog,
		BaseContext:       func(net.Listener) context.Context { return ic.d.hardCtx() },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.Close()
			}
		},
	}
	// Draining: no new requests; those in flight finish, or the door's
	// drain timeout closes the connection under them.
	shutDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shutDone)
		srv.Shutdown(ic.d.hardCtx())
	})
	_ = srv.Serve(l)
	if !l.taken.Load() {
		tc.Close() // shut down before it was served
	}
	<-l.done
	if !stop() {
		<-shutDone
	}
	ic.mu.Lock()
	ic.closed = true
	for ic.active > 0 {
		ic.drained.Wait()
	}
	ic.mu.Unlock()
	ic.tr.CloseIdleConnections()
}

// enter counts a handler in; false once the connection is over.
func (ic *inspectedConn) enter() bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.closed {
		return false
	}
	ic.active++
	return true
}

func (ic *inspectedConn) leave() {
	ic.mu.Lock()
	ic.active--
	if ic.active == 0 {
		ic.drained.Broadcast()
	}
	ic.mu.Unlock()
}

// requestPath is the path of an inspected request as the client sent it.
func requestPath(r *http.Request) string {
	if r.RequestURI == "*" {
		return "*"
	}
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.EscapedPath()
}

// ServeHTTP judges one request and forwards it if the rules admit it.
func (ic *inspectedConn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !ic.enter() {
		return
	}
	defer ic.leave()
	d := ic.d
	norm, err := policy.NormalisePath(requestPath(r))
	path := policy.EscapePath(norm)
	if err != nil {
		path = ""
	}
	what := r.Method + " " + path
	refuse := func(reason, rule, text string) {
		dec := policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: rule}
		d.emit(ic.requestEvent(r.Method, path, dec))
		denyRequest(w, reason, text)
	}
	if reason := ic.checkAuthority(r); reason != "" {
		refuse(reason, inspectRef(ic.rule), d.requestDenyText(what, ic.name, ic.j.Port, policy.Decision{Reason: reason, Rule: inspectRef(ic.rule)},
			"the connection was made to "+ic.name+": send requests for other hosts on connections of their own"))
		return
	}
	if r.Method == http.MethodConnect {
		refuse("connect inside an inspected connection", inspectRef(ic.rule), d.requestDenyText(what, ic.name, ic.j.Port,
			policy.Decision{Reason: "connect inside an inspected connection", Rule: inspectRef(ic.rule)},
			"a tunnel inside the connection would carry requests the door cannot judge; open a new connection instead"))
		return
	}
	if err != nil {
		refuse(policy.ReasonBadPath, inspectRef(ic.rule), d.requestDenyText(r.Method+" (unreadable path)", ic.name, ic.j.Port,
			policy.Decision{Reason: fmt.Sprintf("%s: %v", policy.ReasonBadPath, err), Rule: inspectRef(ic.rule)},
			"send the path percent-encoded, without control characters"))
		return
	}
	pol := d.policy()
	dec := pol.DecideRequest(ic.rule, r.Method, norm)
	d.emit(ic.requestEvent(r.Method, path, dec))
	if dec.Verdict != policy.Allow {
		denyRequest(w, dec.Reason, d.requestDenyText(what, ic.name, ic.j.Port, dec, requestFix(pol, ic.rule, r.Method, norm, dec)))
		return
	}
	if ic.scrub != nil {
		sw := &scrubWriter{ResponseWriter: w, s: ic.scrub}
		ic.rp.ServeHTTP(sw, r)
		ic.scrub.header(w.Header()) // the trailers, set after the body
		return
	}
	ic.rp.ServeHTTP(w, r)
}

// checkAuthority says why a request may not go on this connection, or "".
// The Host (HTTP/1.1) or :authority (HTTP/2) must name the inspected host,
// on the connection's port if it names one.
func (ic *inspectedConn) checkAuthority(r *http.Request) string {
	if r.URL.IsAbs() && !strings.EqualFold(r.URL.Scheme, "https") {
		return fmt.Sprintf("request target %s is not an https:// uri", r.URL.Redacted())
	}
	if r.Host == "" {
		return ""
	}
	h, port, err := policy.SplitTarget(r.Host, ic.j.Port)
	if err != nil {
		return fmt.Sprintf("http host %q is not a valid host: %v", r.Host, err)
	}
	if h.Name != ic.name || port != ic.j.Port {
		return fmt.Sprintf("http host %s does not match inspected host %s", r.Host, ic.target)
	}
	return ""
}

// requestEvent is the decision event of one request.
func (ic *inspectedConn) requestEvent(method, path string, dec policy.Decision) Event {
	ev := Event{
		Event: "decision", Conn: ic.id, Kind: "request", Host: ic.name, Port: ic.j.Port,
		Decision: decisionOf(dec.Verdict), Reason: dec.Reason, Rule: dec.Rule, WouldDeny: dec.WouldDeny,
		Method: method, Path: path,
	}
	if dec.Verdict == 0 {
		ev.Decision = event.Deny
	}
	if ic.client != nil {
		ev.Client = ic.client.String()
	}
	return ev
}

// rewrite makes the outgoing request: to the inspected host, for the path
// that was judged (as it was judged, not as the client spelled it), with the
// injected headers in place of any the client sent under their names.
func (ic *inspectedConn) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	norm, _ := policy.NormalisePath(requestPath(pr.In))
	out.URL.Scheme = "https"
	out.URL.Host = ic.authority
	out.URL.Opaque = policy.EscapePath(norm)
	out.URL.Path, out.URL.RawPath = "", ""
	out.Host = ic.authority
	if strings.EqualFold(out.Header.Get("Upgrade"), "h2c") {
		// HTTP/2 on the upgraded connection would carry requests the door
		// never judges: stay on HTTP/1.1.
		out.Header.Del("Upgrade")
		out.Header.Del("Connection")
	}
	for _, h := range ic.inject {
		out.Header[h.key] = []string{h.value}
	}
	if ic.scrub != nil {
		// The Transport then asks for gzip itself and decodes it, so the
		// body is read as the server wrote it.
		out.Header.Del("Accept-Encoding")
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // send none, as the client sent none
	}
}

// modifyResponse removes injected values from a response's headers and body.
func (ic *inspectedConn) modifyResponse(resp *http.Response) error {
	if ic.scrub == nil {
		return nil
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return fmt.Errorf("%w: %s", errEncodedBody, ce)
	}
	ic.scrub.header(resp.Header)
	resp.Body = ic.scrub.body(resp.Body)
	return nil
}

// upstreamError answers a request the upstream did not answer. A host the
// door cannot verify, or that asks for a client certificate, is a refusal and
// recorded as one.
func (ic *inspectedConn) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	reason, fix := upstreamReason(ic.name, err)
	if r.Context().Err() != nil && fix == "" {
		return // the client went away
	}
	norm, _ := policy.NormalisePath(requestPath(r))
	path := policy.EscapePath(norm)
	if fix == "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "postern door: upstream %s gave no response to %s %s: %s\n", ic.target, r.Method, path, reason)
		return
	}
	dec := policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: inspectRef(ic.rule)}
	ic.d.emit(ic.requestEvent(r.Method, path, dec))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Postern-Decision", decisionHeader(reason))
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, "postern door refused the upstream of %s %s on %s\nreason: %s\n%s\n", r.Method, path, ic.target, reason, fix)
}

// upstreamReason says why an inspected host gave no response, and, when the
// door refused it, what to do (else fix is "").
func upstreamReason(name string, err error) (reason, fix string) {
	var ve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ve):
		return fmt.Sprintf("the certificate of %s failed verification: %v", name, ve.Err),
			"the door verifies an inspected host against this machine's certificate authorities and refuses what it cannot verify; " +
				"if the host is the right one, give its authority to the door (--upstream-ca FILE), or remove " + name + " from inspect to splice it"
	case errors.Is(err, errClientCertAsked):
		return fmt.Sprintf("%s asked for a client certificate (mutual tls), which the door does not have", name),
			"remove " + name + " from inspect: its connections are then spliced, and the client presents its own certificate"
	case errors.Is(err, errEncodedBody):
		return fmt.Sprintf("%s sent a body the door cannot read to remove the injected headers' values from it (%v)", name, err),
			"the door asks for gzip or no encoding; remove inject_header from inspect \"" + name + "\" if the host cannot send either"
	}
	return err.Error(), ""
}

// denyRequest writes a refusal of one request.
func denyRequest(w http.ResponseWriter, reason, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Postern-Decision", decisionHeader(reason))
	h.Set("Content-Length", strconv.Itoa(len(text)))
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, text)
}

// scrubWriter masks injected values in every header written through it,
// interim responses' included.
type scrubWriter struct {
	http.ResponseWriter
	s *scrubber
}

func (w *scrubWriter) WriteHeader(code int) {
	w.s.header(w.ResponseWriter.Header())
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (to flush, to
// hand an upgraded connection over).
func (w *scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
