package door

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// Inspection. For a host the policy names in an inspect block, the door
// terminates TLS itself with a certificate from the run's Authority, serves
// the requests with net/http's server (HTTP/1.1 and HTTP/2 by ALPN), judges
// each by method and normalised path, adds the configured headers, and
// forwards it with net/http's Transport, which verifies the host against this
// machine's roots. Every other host stays spliced end to end. Plain HTTP to
// an inspected host is held to the same request rules, without the headers:
// they would cross the network in the clear.

// inspector is what the door needs to inspect: the authority, the roots it
// verifies upstreams with, and the values of the injected headers.
type inspector struct {
	ca    *Authority
	roots *x509.CertPool
	tls   *tls.Config // the server side, shared so that sessions resume
	// inject and scrub are per inspected host.
	inject map[string][]injectedHeader
	scrub  map[string]*scrubber
}

// injectedHeader is a header set on every request to an inspected host.
type injectedHeader struct {
	key   string // canonical
	value string
}

// newInspector reads what inspection needs when the policy inspects a host:
// the header values (from postern's environment or files), the extra roots.
// It returns nil for a policy that inspects nothing.
func newInspector(cfg Config) (*inspector, error) {
	pol := cfg.Policy
	if len(pol.Inspect) == 0 {
		return nil, nil
	}
	in := &inspector{ca: cfg.Authority, inject: map[string][]injectedHeader{}, scrub: map[string]*scrubber{}}
	hosts := make([]string, 0, len(pol.Inspect))
	for _, r := range pol.Inspect {
		hosts = append(hosts, r.Host)
		var values []string
		for _, h := range r.Inject {
			v, err := injectValue(r.Host, h)
			if err != nil {
				return nil, err
			}
			in.inject[r.Host] = append(in.inject[r.Host], injectedHeader{key: h.Header, value: v})
			values = append(values, v)
		}
		in.scrub[r.Host] = newScrubber(values)
	}
	if in.ca == nil {
		ca, err := NewAuthority(hosts)
		if err != nil {
			return nil, err
		}
		in.ca = ca
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if cfg.UpstreamRoots != "" {
		data, err := os.ReadFile(cfg.UpstreamRoots)
		if err != nil {
			return nil, fmt.Errorf("read the upstream roots %s: %w", cfg.UpstreamRoots, err)
		}
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("upstream roots %s holds no PEM certificate: give a file of CERTIFICATE blocks", cfg.UpstreamRoots)
		}
	}
	in.roots = roots
	in.tls = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			cc, ok := hello.Conn.(*inspectClientConn)
			if !ok {
				return nil, errors.New("handshake on a connection the door did not admit for inspection")
			}
			cc.certSent.Store(true)
			return in.ca.leaf(cc.name)
		},
	}
	return in, nil
}

// injectValue reads one injected header's value. Errors name where it was to
// come from, never the value.
func injectValue(host string, h policy.HeaderInject) (string, error) {
	where := fmt.Sprintf("inject_header %s for %s (%s)", h.Header, host, h.Pos)
	var v string
	if h.Env != "" {
		val, ok := os.LookupEnv(h.Env)
		if !ok || val == "" {
			return "", fmt.Errorf("%s: postern's environment has no %s; set it where postern starts (the run never sees it)", where, h.Env)
		}
		v = val
	} else {
		data, err := os.ReadFile(h.File)
		if err != nil {
			return "", fmt.Errorf("%s: %w", where, err)
		}
		v = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	}
	if !httpguts.ValidHeaderFieldValue(v) || strings.ContainsAny(v, "\r\n") {
		return "", fmt.Errorf("%s: the value from %s holds a line break or control character; a header value is one line", where, h.Source())
	}
	if len(strings.TrimSpace(v)) < minSecretLen {
		return "", fmt.Errorf("%s: the value from %s is shorter than %d bytes, too short to remove from responses without changing other bytes", where, h.Source(), minSecretLen)
	}
	return strings.TrimSpace(v), nil
}

// inspection returns the inspected host a connection admitted as j carries,
// and its rules, or "" when the connection is not inspected. A connection
// admitted by name is inspected when that name is; one admitted by address
// when the name it sent (TLS server_name, HTTP Host) is.
func (d *Door) inspection(j Judgement, sent string) (string, *policy.InspectRule) {
	if d.insp == nil {
		return "", nil
	}
	pol := d.policy()
	if j.Host.Name != "" {
		if r := pol.Inspection(j.Host.Name); r != nil {
			return j.Host.Name, r
		}
		return "", nil
	}
	if sent == "" {
		return "", nil
	}
	h, _, err := policy.SplitTarget(sent, j.Port)
	if err != nil || h.Name == "" {
		return "", nil
	}
	if r := pol.Inspection(h.Name); r != nil {
		return h.Name, r
	}
	return "", nil
}

// inspectsName reports whether connections admitted for h are inspected, so
// that their first bytes must be read before anything else happens.
func (d *Door) inspectsName(h policy.Host) bool {
	return d.insp != nil && h.Name != "" && d.policy().Inspection(h.Name) != nil
}

// inspectTLS is pipe's onTLS for a connection admitted as j, whose upstream
// up is connected to addr: it claims a ClientHello for an inspected host.
// It returns nil when the policy inspects no host.
func (d *Door) inspectTLS(ctx context.Context, c, up net.Conn, addr netip.Addr, j Judgement, id uint64, kind event.Kind) func(firstBytes) func([]byte) (int64, int64) {
	if d.insp == nil {
		return nil
	}
	return func(fb firstBytes) func([]byte) (int64, int64) {
		name, rule := d.inspection(j, fb.name)
		if rule == nil {
			return nil
		}
		return func(head []byte) (int64, int64) {
			if head == nil {
				hj := j
				hj.Decision = policy.Decision{Verdict: policy.Deny, Rule: inspectRef(rule),
					Reason: fmt.Sprintf("the server of %s spoke before the client's tls hello, so the connection cannot be inspected", name)}
				d.emit(d.decisionEvent(id, kind, c.RemoteAddr(), hj))
				return 0, 0
			}
			return d.serveInspected(ctx, c, up, addr, j, id, kind, name, rule, head)
		}
	}
}

// AuthorityPEM is the certificate (PEM) of the authority the door shows
// inspected hosts' certificates from, which their clients must trust; nil
// when the policy inspects no host.
func (d *Door) AuthorityPEM() []byte {
	if d.insp == nil {
		return nil
	}
	return d.insp.ca.CertPEM()
}
