//go:build linux

package benchmark

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// The inspection benchmark: HTTPS requests to a host whose TLS the proxy
// terminates, judges and re-encrypts, with a header injected, through the
// door and through mitmproxy doing the same (a small addon: the same method
// and path rule, the same header, the same masking of an echoed value),
// beside the direct path. One Go client measures every path alike.

// ToolMitmproxy is what the inspection rows compare with.
var ToolMitmproxy = Tool{"mitmdump", "mitmproxy", "the mitmproxy rows"}

// InspectConfig says what to measure. Zero values take the defaults.
type InspectConfig struct {
	// Postern is the built postern binary; "" builds ./cmd/postern.
	Postern string
	// RPSDuration of each keep-alive run (default 5s) over RPSConns
	// connections (default 16).
	RPSDuration time.Duration
	RPSConns    int
	// Samples sequential keep-alive requests per path for latency (default
	// 2000), NewConnSamples new connections with one request each (default
	// 200).
	Samples, NewConnSamples int
	Logger                  *slog.Logger
}

func (c *InspectConfig) defaults() {
	if c.RPSDuration == 0 {
		c.RPSDuration = 5 * time.Second
	}
	if c.RPSConns == 0 {
		c.RPSConns = 16
	}
	if c.Samples == 0 {
		c.Samples = 2000
	}
	if c.NewConnSamples == 0 {
		c.NewConnSamples = 200
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// InspectPath is what was measured on one path.
type InspectPath struct {
	Name string
	Err  string
	// RPS is keep-alive requests per second over RPSConns connections;
	// Errors the requests that failed or were not answered 200.
	RPS    float64
	Errors int
	// LatP50 and LatP99 are a keep-alive request's round trip, one at a
	// time on one connection.
	LatP50, LatP99 time.Duration
	// NewP50 and NewP99 are a new connection's first request: CONNECT (via a
	// proxy), a full TLS handshake, one request.
	NewP50, NewP99 time.Duration
}

// InspectReport is one run's results.
type InspectReport struct {
	Config    InspectConfig
	Machine   Machine
	Mitmproxy string
	Paths     []InspectPath // Paths[0] is direct
	Elapsed   time.Duration
	Notes     []string
}

const (
	inspectHost = "api.bench.test"
	inspectPort = 443
	inspectPath = "/bench/ok"
)

// RunInspect measures the inspection paths. It needs root (test hosts); all
// traffic stays on loopback and the lab's veth links.
func RunInspect(ctx context.Context, cfg InspectConfig) (*InspectReport, error) {
	cfg.defaults()
	log := cfg.Logger
	started := time.Now()
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	rep := &InspectReport{Config: cfg}
	missing := EnsureTools(ctx, os.Stderr, []Tool{ToolMitmproxy, ToolNginx})
	if why, ok := missing[ToolMitmproxy.Program]; ok {
		rep.Notes = append(rep.Notes, "mitmproxy: "+why)
	}
	if why, ok := missing[ToolNginx.Program]; ok {
		// Every row's upstream: nothing to measure without it.
		return nil, fmt.Errorf("nginx: %s", why)
	}
	dir, bin, err := workDirWithPostern(ctx, log, "postern-inspectbench-", cfg.Postern, true)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rep.Machine = describe(bin)
	rep.Mitmproxy = firstLine(exec.Command("mitmdump", "--version"))

	lab, err := newBenchLab(ctx, "ibench")
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	root := filepath.Join(lab.Dir(), "www")
	if err := os.MkdirAll(filepath.Join(root, "bench"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "bench", "ok"), []byte("ok\n"), 0o644); err != nil {
		return nil, err
	}
	up, err := lab.upstream.ServeNginx(ctx, testhosts.NginxOptions{Root: root, Port: inspectPort, TLSNames: []string{inspectHost}})
	if err != nil {
		return nil, err
	}
	labCA, err := loadPool(lab.CAFile())
	if err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	rand.Read(token)
	tokenValue := "Bearer bench-" + hex.EncodeToString(token)

	paths := []*inspectTarget{{name: "direct", roots: labCA, upstream: up.Addr}}
	door, err := startInspectDoor(ctx, bin, dir, lab, up.Addr.Addr(), tokenValue)
	if err != nil {
		return nil, fmt.Errorf("start the door: %w", err)
	}
	defer door.proc.Close()
	paths = append(paths, door)
	if _, ok := missing[ToolMitmproxy.Program]; !ok {
		mitm, err := startMitmproxy(ctx, dir, lab.CAFile(), up.Addr.Addr(), tokenValue)
		if err != nil {
			rep.Notes = append(rep.Notes, "mitmproxy did not start: "+err.Error())
		} else {
			defer mitm.proc.Close()
			paths = append(paths, mitm)
		}
	}
	for _, p := range paths {
		res := InspectPath{Name: p.name}
		if err := p.check(ctx); err != nil {
			res.Err = err.Error()
			rep.Paths = append(rep.Paths, res)
			continue
		}
		log.Info("inspected keep-alive requests", "path", p.name, "duration", cfg.RPSDuration, "conns", cfg.RPSConns)
		res.RPS, res.Errors = p.keepAliveRPS(ctx, cfg.RPSDuration, cfg.RPSConns)
		log.Info("inspected request latency", "path", p.name, "samples", cfg.Samples, "new connections", cfg.NewConnSamples)
		lat, err := p.latencies(ctx, cfg.Samples, false)
		if err == nil {
			res.LatP50, res.LatP99 = percentile(lat, 0.50), percentile(lat, 0.99)
			lat, err = p.latencies(ctx, cfg.NewConnSamples, true)
			res.NewP50, res.NewP99 = percentile(lat, 0.50), percentile(lat, 0.99)
		}
		if err != nil {
			res.Err = err.Error()
		}
		rep.Paths = append(rep.Paths, res)
	}
	rep.Elapsed = time.Since(started)
	return rep, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("no certificate in %s", file)
	}
	return p, nil
}

// inspectTarget is one path: direct to the upstream, or through a proxy
// whose authority roots holds.
type inspectTarget struct {
	name     string
	proxy    string // host:port; "" for direct
	roots    *x509.CertPool
	upstream netip.AddrPort // direct only
	proc     *proxyProc
}

// transport is a client with at most one connection, HTTP/1.1, that
// resumes no TLS session unless keep says so.
func (p *inspectTarget) transport() *http.Transport {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: p.roots},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		IdleConnTimeout:     time.Minute,
	}
	if p.proxy != "" {
		u := &url.URL{Scheme: "http", Host: p.proxy}
		tr.Proxy = http.ProxyURL(u)
	} else {
		up := p.upstream.String()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, up)
		}
	}
	return tr
}

var inspectURL = "https://" + inspectHost + inspectPath

// do sends one GET and reads the answer; the body must be the file's.
func do(ctx context.Context, c *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == 200 && string(b) != "ok\n" {
		return resp.StatusCode, fmt.Errorf("body %q, want the file's", b)
	}
	return resp.StatusCode, nil
}

// check proves the path does what is measured: the allowed request answers
// 200 with the file, and through a proxy a request outside the rule is
// refused.
func (p *inspectTarget) check(ctx context.Context) error {
	tr := p.transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if code, err := do(ctx, c, inspectURL); err != nil || code != 200 {
		return fmt.Errorf("%s: GET %s: status %d: %v", p.name, inspectURL, code, err)
	}
	if p.proxy == "" {
		return nil
	}
	if code, _ := do(ctx, c, "https://"+inspectHost+"/elsewhere"); code != http.StatusForbidden {
		return fmt.Errorf("%s: a request outside the rule got status %d, want 403: it does not judge requests", p.name, code)
	}
	return nil
}

// keepAliveRPS runs conns clients, each on one kept connection, for d.
func (p *inspectTarget) keepAliveRPS(ctx context.Context, d time.Duration, conns int) (float64, int) {
	var done, failed atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			tr := p.transport()
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			for ctx.Err() == nil {
				code, err := do(ctx, c, inspectURL)
				switch {
				case ctx.Err() != nil:
				case err != nil || code != 200:
					failed.Add(1)
				default:
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), int(failed.Load())
}

// latencies times n requests one after another: on one kept connection
// (after a warm-up), or each on a new connection with a full handshake.
func (p *inspectTarget) latencies(ctx context.Context, n int, fresh bool) ([]time.Duration, error) {
	tr := p.transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if !fresh {
		for range 50 {
			if _, err := do(ctx, c, inspectURL); err != nil {
				return nil, err
			}
		}
	}
	out := make([]time.Duration, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fresh {
			tr.CloseIdleConnections()
			tr = p.transport()
			c.Transport = tr
		}
		t0 := time.Now()
		code, err := do(ctx, c, inspectURL)
		if err != nil || code != 200 {
			return nil, fmt.Errorf("%s: request %d: status %d: %v", p.name, len(out), code, err)
		}
		out = append(out, time.Since(t0))
	}
	slices.Sort(out)
	return out, nil
}

// startInspectDoor runs `postern door` inspecting the benchmark's host.
func startInspectDoor(ctx context.Context, bin, dir string, lab *benchLab, upstream netip.Addr, token string) (*inspectTarget, error) {
	pol := filepath.Join(dir, "inspect-policy.hcl")
	src := fmt.Sprintf(`ports = [%d]
allow = [%q]
allow_cidrs = [%q]

inspect %q {
  allow_methods = ["GET", "HEAD"]
  allow_paths   = ["/bench/**"]
  inject_header = { Authorization = "env:POSTERN_BENCH_TOKEN" }
}
`, inspectPort, inspectHost, lab.Subnet(), inspectHost)
	if err := os.WriteFile(pol, []byte(src), 0o644); err != nil {
		return nil, err
	}
	caOut := filepath.Join(dir, "door-ca.pem")
	cmd := exec.Command(bin, "door", "--policy", pol, "--listen", "127.0.0.1:0", "--resolver", lab.dns.Addr.String(),
		"--add-host", inspectHost+":"+upstream.String(), "--upstream-ca", lab.CAFile(), "--ca-out", caOut)
	cmd.Env = append(os.Environ(), "POSTERN_BENCH_TOKEN="+token)
	proc, err := startProxy(ctx, "postern door", cmd, "", doorListening)
	if err != nil {
		return nil, err
	}
	roots, err := loadPool(caOut)
	if err != nil {
		proc.Close()
		return nil, err
	}
	return &inspectTarget{name: "postern door", proxy: proc.Addr, roots: roots, proc: proc}, nil
}

// mitmAddon is what mitmproxy runs for each flow: the door's work for the
// same policy, written in mitmproxy's own addon API.
const mitmAddon = `import os
from mitmproxy import http

TOKEN = os.environ["POSTERN_BENCH_TOKEN"]
MASK = "*" * len(TOKEN)


def request(flow: http.HTTPFlow) -> None:
    if flow.request.method not in ("GET", "HEAD") or not flow.request.path.startswith("/bench/"):
        flow.response = http.Response.make(403, b"denied\n", {"Content-Type": "text/plain"})
        return
    flow.request.headers["Authorization"] = TOKEN


def response(flow: http.HTTPFlow) -> None:
    for k, v in flow.response.headers.items(multi=True):
        if TOKEN in v:
            flow.response.headers[k] = v.replace(TOKEN, MASK)
    body = flow.response.raw_content
    if body and TOKEN.encode() in body:
        flow.response.raw_content = body.replace(TOKEN.encode(), MASK.encode())
`

// startMitmproxy runs mitmdump intercepting every host, verifying upstreams
// against the lab's CA, with the addon. It resolves names with the system
// resolver, so it runs in a mount namespace of its own where /etc/hosts
// names the benchmark's host (nothing outside it changes).
func startMitmproxy(ctx context.Context, dir, labCA string, upstream netip.Addr, token string) (*inspectTarget, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "mitmproxy")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, err
	}
	addon := filepath.Join(dir, "mitm_addon.py")
	if err := os.WriteFile(addon, []byte(mitmAddon), 0o644); err != nil {
		return nil, err
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+upstream.String()+" "+inspectHost+"\n"), 0o644); err != nil {
		return nil, err
	}
	mitm, err := exec.LookPath("mitmdump")
	if err != nil {
		return nil, err
	}
	script := fmt.Sprintf("mount --bind %s /etc/hosts && exec %s -q --listen-host 127.0.0.1 --listen-port %d --set confdir=%s --set ssl_verify_upstream_trusted_ca=%s -s %s",
		hosts, mitm, port, conf, labCA, addon)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "POSTERN_BENCH_TOKEN="+token)
	proc, err := startProxy(ctx, "mitmproxy", cmd, fmt.Sprintf("127.0.0.1:%d", port), nil)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(conf, "mitmproxy-ca-cert.pem")
	var roots *x509.CertPool
	for deadline := time.Now().Add(10 * time.Second); ; {
		if roots, err = loadPool(caFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			proc.Close()
			return nil, fmt.Errorf("mitmproxy wrote no CA to %s: %w", caFile, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &inspectTarget{name: "mitmproxy", proxy: proc.Addr, roots: roots, proc: proc}, nil
}
