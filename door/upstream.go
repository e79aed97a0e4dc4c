package door

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// Upstream is a proxy a door sends every connection on to, as an HTTP
// CONNECT (or, for an absolute-URI request on its explicit proxy, as that
// request), instead of judging it by its policy: a gateway, which judges it
// for the client the credentials name, or a corporate proxy. The door still
// refuses literal addresses on the hard floor itself; every name is sent on
// unresolved, and the wall's DNS answers every name with a fake address.
type Upstream struct {
	// Addr is the proxy's host:port.
	Addr string
	// Authorization is the Proxy-Authorization value sent with every
	// request ("Basic ..."), "" for none. It is never recorded.
	Authorization string
	// Name is the proxy's URL without credentials, as events and messages
	// name it.
	Name string
}

// ParseUpstream reads a proxy URL, http://[NAME:TOKEN@]HOST:PORT.
func ParseUpstream(raw string) (*Upstream, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream proxy %q: write http://NAME:TOKEN@HOST:PORT (only http:// proxies, no path)", redactURL(raw))
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "3128"
	}
	up := &Upstream{Addr: net.JoinHostPort(host, port), Name: "http://" + net.JoinHostPort(host, port)}
	if u.User != nil {
		pass, _ := u.User.Password()
		up.Authorization = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))
	}
	return up, nil
}

// redactURL is raw with any password replaced, for error messages.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndexByte(raw, '@'); i >= 0 {
		return "http://REDACTED@" + raw[i+1:]
	}
	return raw
}

// reasonUpstream is the decision of a door that sends everything on.
func (u *Upstream) reason() string { return "sent on to " + u.Name }

// upstreamTunnel asks the upstream for a tunnel to target (host:port). It
// returns the connection and a reader holding what the proxy sent after its
// answer; on a refusal resp is the proxy's answer, with its body.
func (d *Door) upstreamTunnel(ctx context.Context, target string) (net.Conn, *bufio.Reader, *http.Response, error) {
	up := d.cfg.Upstream
	ctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	defer cancel()
	nd := net.Dialer{KeepAlive: -1}
	c, err := nd.DialContext(ctx, "tcp", up.Addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to upstream proxy %s: %w", up.Name, err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	var b strings.Builder
	fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n", target, target)
	if up.Authorization != "" {
		b.WriteString("Proxy-Authorization: " + up.Authorization + "\r\n")
	}
	b.WriteString("\r\n")
	br := bufio.NewReaderSize(c, 4<<10)
	_, err = io.WriteString(c, b.String())
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	}
	if err == nil && resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		resp.ContentLength = int64(len(body))
	}
	if !stop() {
		err = errors.Join(err, fmt.Errorf("upstream proxy %s did not answer within %s", up.Name, d.cfg.DialTimeout))
	}
	c.SetDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("CONNECT %s through upstream proxy %s: %w", target, up.Name, err)
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, nil, resp, nil
	}
	return c, br, resp, nil
}

// refusedReason is why the upstream refused: its X-Postern-Decision reason
// when it is a postern gateway, else its status.
func (d *Door) refusedReason(resp *http.Response) string {
	reason := resp.Status
	if v := resp.Header.Get("X-Postern-Decision"); v != "" {
		if _, r, ok := strings.Cut(v, "reason="); ok {
			if uq, err := unquote(r); err == nil {
				reason = uq
			}
		}
	}
	return fmt.Sprintf("refused by %s: %s", d.cfg.Upstream.Name, reason)
}

func unquote(s string) (string, error) {
	var out string
	_, err := fmt.Sscanf(s, "%q", &out)
	return out, err
}

// floorDenies judges a literal address against the local hard floor, the
// one thing a door with an upstream still decides.
func (d *Door) floorDenies(h policy.Host, port uint16) (Judgement, bool) {
	j := Judgement{Host: h, Port: port}
	if !h.Addr.IsValid() {
		return j, false
	}
	if reason, ok := d.policy().OnFloor(h.Addr); ok {
		j.Addr = h.Addr
		j.Decision = policy.Decision{Verdict: policy.Deny, Reason: reason, Floor: true}
		return j, true
	}
	return j, false
}

// sentOn is the judgement recorded for a destination sent on.
func (d *Door) sentOn(h policy.Host, port uint16) Judgement {
	return Judgement{Host: h, Port: port, Decision: policy.Decision{Verdict: policy.Allow, Reason: d.cfg.Upstream.reason()}}
}

// refusedBy is the judgement recorded for a destination the upstream refused.
func (d *Door) refusedBy(h policy.Host, port uint16, resp *http.Response, err error) Judgement {
	reason := ""
	if err != nil {
		reason = err.Error()
	} else {
		reason = d.refusedReason(resp)
	}
	return Judgement{Host: h, Port: port, Decision: policy.Decision{Verdict: policy.Deny, Reason: reason}}
}

// writeUpstreamRefusal passes the upstream's refusal on to the client as it
// came, closing the connection after it.
func writeUpstreamRefusal(c io.Writer, resp *http.Response) error {
	resp.Header.Del("Connection")
	resp.Header.Del("Transfer-Encoding")
	resp.Header.Set("Connection", "close")
	resp.Close = true
	resp.TransferEncoding = nil
	return resp.Write(c)
}

// connectUpstream serves an explicit CONNECT by the upstream's tunnel; the
// client gets the upstream's own answer.
func (d *Door) connectUpstream(ctx context.Context, c net.Conn, id uint64, start time.Time, h policy.Host, port uint16, pre []byte) {
	if j, deny := d.floorDenies(h, port); deny {
		d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
		writeDenied(c, j.Decision.Reason, d.denyText("CONNECT "+targetString(h, port), j), true)
		return
	}
	up, br, resp, err := d.upstreamTunnel(ctx, targetString(h, port))
	if up == nil {
		j := d.refusedBy(h, port, resp, err)
		d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
		if resp != nil {
			writeUpstreamRefusal(c, resp)
		} else {
			writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door could not reach its upstream proxy: %v\n", err), true)
		}
		return
	}
	d.track(up)
	defer d.untrack(up)
	j := d.sentOn(h, port)
	_, werr := c.Write(connectEstablished)
	d.emit(d.decisionEvent(id, event.Connect, c.RemoteAddr(), j))
	if werr != nil {
		d.emitEnd(id, event.Connect, j, 0, 0, start, "client went away")
		return
	}
	upN, downN := d.spliceUpstream(c, up, br, pre)
	d.emitEnd(id, event.Connect, j, upN, downN, start, "closed")
}

// spliceUpstream relays a client and its upstream tunnel both ways: first
// what the proxy sent past its answer, and pre, what the client sent past its
// request.
func (d *Door) spliceUpstream(c, up net.Conn, br *bufio.Reader, pre []byte) (upN, downN int64) {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		w, err := c.Write(b)
		downN += int64(w)
		if err != nil {
			return 0, downN
		}
	}
	if len(pre) > 0 {
		w, err := up.Write(pre)
		upN += int64(w)
		if err != nil {
			return upN, downN
		}
	}
	downc := make(chan int64, 1)
	go func() { downc <- pump(c, up) }()
	upN += pump(up, c)
	return upN, downN + <-downc
}

// serveTransparentUpstream sends a redirected connection on as a tunnel
// through the upstream. A refusal reaches a plain HTTP client as the
// upstream's own answer; any other client sees the connection close.
func (d *Door) serveTransparentUpstream(ctx context.Context, c net.Conn, id uint64, start time.Time, h policy.Host, port uint16) {
	if j, deny := d.floorDenies(h, port); deny {
		d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
		return
	}
	up, br, resp, err := d.upstreamTunnel(ctx, targetString(h, port))
	if up == nil {
		j := d.refusedBy(h, port, resp, err)
		d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
		if port == 80 && resp != nil {
			if _, fb, herr := readHead(c, nil, time.Now().Add(peekTimeout)); fb.kind == headHTTP && herr == nil {
				writeUpstreamRefusal(c, resp)
			}
		}
		return
	}
	d.track(up)
	defer d.untrack(up)
	j := d.sentOn(h, port)
	d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
	upN, downN := d.spliceUpstream(c, up, br, nil)
	d.emitEnd(id, event.Transparent, j, upN, downN, start, "closed")
}

// upstreamTransport sends absolute-URI requests on to the upstream proxy as
// absolute-URI requests, with its credentials.
func (d *Door) newUpstreamTransport() *http.Transport {
	up := d.cfg.Upstream
	proxyURL := &url.URL{Scheme: "http", Host: up.Addr}
	hdr := http.Header{}
	if up.Authorization != "" {
		hdr.Set("Proxy-Authorization", up.Authorization)
	}
	return &http.Transport{
		Proxy:                  func(*http.Request) (*url.URL, error) { return proxyURL, nil },
		ProxyConnectHeader:     hdr,
		DialContext:            (&net.Dialer{KeepAlive: -1, Timeout: d.cfg.DialTimeout}).DialContext,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// oneUpstream sends one absolute-URI request on to the upstream proxy and
// writes its answer (the upstream's refusal included) back.
func (s *httpSession) oneUpstream(req *http.Request, facts headFacts, h policy.Host, port uint16, id uint64, start time.Time) bool {
	d := s.d
	remote := s.c.RemoteAddr()
	what := req.Method + " " + req.URL.String()
	if j, deny := d.floorDenies(h, port); deny {
		d.emit(d.decisionEvent(id, event.HTTP, remote, j))
		s.denied(j.Decision.Reason, d.denyText(what, j), true)
		return false
	}
	out := req.Clone(d.hardCtx())
	out.RequestURI = ""
	out.Close = false
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""}
	}
	if d.cfg.Upstream.Authorization != "" {
		out.Header.Set("Proxy-Authorization", d.cfg.Upstream.Authorization)
	}
	if req.ContentLength != 0 {
		out.Body = &clientBody{r: req.Body}
	} else {
		out.Body = nil
	}
	if s.tr == nil {
		s.tr = d.newUpstreamTransport()
	}
	up0, down0 := s.counts()
	resp, err := s.tr.RoundTrip(out)
	if err != nil {
		j := d.refusedBy(h, port, nil, err)
		d.emit(d.decisionEvent(id, event.HTTP, remote, j))
		s.status(502, "Bad Gateway", fmt.Sprintf("postern door could not send %s on to its upstream proxy: %v\n", what, err), true)
		return false
	}
	j := d.sentOn(h, port)
	if resp.StatusCode == http.StatusProxyAuthRequired || resp.Header.Get("X-Postern-Decision") != "" {
		j = d.refusedBy(h, port, resp, nil)
	}
	d.emit(d.decisionEvent(id, event.HTTP, remote, j))
	keep, reason := s.writeResponse(req, resp, facts)
	resp.Body.Close()
	if cb, ok := out.Body.(*clientBody); ok && !cb.abandon(s.c) {
		keep = false
	}
	up1, down1 := s.counts()
	d.emitEnd(id, event.HTTP, j, up1-up0, down1-down0, start, reason)
	return keep
}
