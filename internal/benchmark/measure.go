//go:build linux

package benchmark

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// path is one way to reach the upstream servers: directly, or through a proxy.
// Each path has its own upstream ports, so one path's TIME_WAIT sockets never
// exhaust the ephemeral ports another path needs.
type path struct {
	Name  string
	proxy *proxyProc // nil: direct
	// connectOnly paths serve CONNECT alone: no keep-alive or idle rows.
	connectOnly bool

	bulk, echo, web netip.AddrPort
	idle            netip.AddrPort // served by the echo child during the idle test
	// auth, if set, gives the Proxy-Authorization value of each request
	// (a gateway's, or squid's with per-user ACLs).
	auth func() string
}

func (p *path) direct() bool { return p.proxy == nil }

// dial opens a byte stream to dst: a TCP connection, or a CONNECT tunnel
// through the path's proxy.
func (p *path) dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	c, _, err := p.dialTimed(ctx, dst)
	return c, err
}

// setupPhases is how long each step of opening a connection took.
type setupPhases struct {
	Connect    time.Duration // TCP connect, to the proxy or to the upstream
	Connect200 time.Duration // CONNECT written to its 200 read; 0 direct
	Echo       time.Duration // one byte out to its echo back (setupLatency)
}

func (s setupPhases) total() time.Duration { return s.Connect + s.Connect200 + s.Echo }

// dialTimed is dial, timing the TCP connect and the CONNECT exchange.
func (p *path) dialTimed(ctx context.Context, dst netip.AddrPort) (net.Conn, setupPhases, error) {
	var d net.Dialer
	var ph setupPhases
	start := time.Now()
	if p.direct() {
		c, err := d.DialContext(ctx, "tcp", dst.String())
		ph.Connect = time.Since(start)
		return c, ph, err
	}
	c, err := d.DialContext(ctx, "tcp", p.proxy.Addr)
	if err != nil {
		return nil, ph, err
	}
	ph.Connect = time.Since(start)
	start = time.Now()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	target := dst.String()
	extra := ""
	if p.auth != nil {
		extra = "Proxy-Authorization: " + p.auth() + "\r\n"
	}
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+extra+"\r\n"); err != nil {
		c.Close()
		return nil, ph, err
	}
	br := bufio.NewReaderSize(c, 1024)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, ph, fmt.Errorf("connect %s via %s: %w", target, p.Name, err)
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, ph, fmt.Errorf("connect %s via %s: %s", target, p.Name, resp.Status)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, ph, fmt.Errorf("connect %s via %s: proxy sent bytes before the client spoke", target, p.Name)
	}
	ph.Connect200 = time.Since(start)
	c.SetDeadline(time.Time{})
	return c, ph, nil
}

// throughput fetches size bytes runs times through one tunnel each and returns
// the median rate in bytes per second, and the median CPU time the whole
// machine spent per GiB moved (client, proxy, server and kernel alike).
func throughput(ctx context.Context, p *path, size int64, runs int) (rate, cpuPerGiB float64, err error) {
	buf := make([]byte, 256<<10)
	var rates, cpus []float64
	for i := 0; i < runs; i++ {
		c, err := p.dial(ctx, p.bulk)
		if err != nil {
			return 0, 0, err
		}
		busy0, berr := machineBusy()
		start := time.Now()
		err = fetch(c, buf, size)
		el := time.Since(start)
		busy1, berr1 := machineBusy()
		c.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("bulk via %s: %w", p.Name, err)
		}
		rates = append(rates, float64(size)/el.Seconds())
		// /proc/stat counts in ticks of 10 ms: a shorter transfer than
		// minCPUSample says little about its CPU.
		if berr == nil && berr1 == nil && el >= minCPUSample {
			cpus = append(cpus, (busy1-busy0).Seconds()/(float64(size)/(1<<30)))
		}
	}
	slices.Sort(rates)
	if len(cpus) > 0 {
		cpuPerGiB = median(cpus)
	}
	return rates[len(rates)/2], cpuPerGiB, nil
}

// minCPUSample is the shortest transfer whose CPU time is recorded.
const minCPUSample = 250 * time.Millisecond

// machineBusy is the CPU time all cores have spent not idle since boot, from
// /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest times are already counted in user
			break
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

func fetch(c net.Conn, buf []byte, n int64) error {
	var hdr [8]byte
	for i := 0; i < 8; i++ {
		hdr[i] = byte(n >> (56 - 8*i))
	}
	if _, err := c.Write(hdr[:]); err != nil {
		return err
	}
	var got int64
	for got < n {
		m, err := c.Read(buf)
		got += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) && got >= n {
				break
			}
			return fmt.Errorf("after %d of %d bytes: %w", got, n, err)
		}
	}
	return nil
}

// setupOnce opens one new connection through p up to its first echoed byte:
// dial (and CONNECT), send one byte, read it back.
func setupOnce(ctx context.Context, p *path) (setupPhases, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, ph, err := p.dialTimed(cctx, p.echo)
	if err != nil {
		return ph, fmt.Errorf("latency via %s: %w", p.Name, err)
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(5 * time.Second))
	var b [1]byte
	if _, err := c.Write([]byte{'x'}); err != nil {
		return ph, fmt.Errorf("latency via %s: %w", p.Name, err)
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return ph, fmt.Errorf("latency via %s: %w", p.Name, err)
	}
	ph.Echo = time.Since(start)
	return ph, nil
}

// setupLatency measures n setups back to back, after a warm-up.
func setupLatency(ctx context.Context, p *path, n int) ([]setupPhases, error) {
	for i := 0; i < n/20+5; i++ {
		if _, err := setupOnce(ctx, p); err != nil {
			return nil, err
		}
	}
	out := make([]setupPhases, 0, n)
	for i := 0; i < n; i++ {
		ph, err := setupOnce(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, ph)
	}
	return out, nil
}

// idleSetups measures n setups per path with the machine idle for gap before
// each, the paths taking turns: how a connection fares when it is not one
// of a stream, as an agent's usually are. Totals are sorted per path.
func idleSetups(ctx context.Context, paths []*path, n int, gap time.Duration) ([][]time.Duration, []error) {
	out := make([][]time.Duration, len(paths))
	errs := make([]error, len(paths))
	for s := 0; s < n; s++ {
		for i, p := range paths {
			if errs[i] != nil {
				continue
			}
			select {
			case <-ctx.Done():
				errs[i] = ctx.Err()
				continue
			case <-time.After(gap):
			}
			ph, err := setupOnce(ctx, p)
			if err != nil {
				errs[i] = err
				continue
			}
			out[i] = append(out[i], ph.total())
		}
	}
	for i := range out {
		slices.Sort(out[i])
	}
	return out, errs
}

// phaseP50s are the medians of each phase of samples, and of their totals.
func phaseP50s(samples []setupPhases) (connect, connect200, echo time.Duration) {
	med := func(f func(setupPhases) time.Duration) time.Duration {
		xs := make([]time.Duration, len(samples))
		for i, s := range samples {
			xs[i] = f(s)
		}
		slices.Sort(xs)
		return percentile(xs, 0.50)
	}
	return med(func(s setupPhases) time.Duration { return s.Connect }),
		med(func(s setupPhases) time.Duration { return s.Connect200 }),
		med(func(s setupPhases) time.Duration { return s.Echo })
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

var (
	wrkRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	wrkSock   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// keepAliveRPS runs wrk for d with conns keep-alive connections: GET / to the
// web server directly, or GET http://web/ (absolute URI) to the proxy. It
// returns requests per second and the count of failed requests.
func keepAliveRPS(ctx context.Context, p *path, dir string, d time.Duration, conns int) (float64, int, error) {
	args := []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s", "--timeout", "5s"}
	if p.direct() {
		args = append(args, "http://"+p.web.String()+"/")
	} else {
		script := filepath.Join(dir, "wrk-"+strings.ReplaceAll(p.Name, " ", "-")+".lua")
		src := fmt.Sprintf("wrk.path = %q\nwrk.headers[\"Host\"] = %q\n", "http://"+p.web.String()+"/", p.web.String())
		if p.auth != nil {
			src += fmt.Sprintf("wrk.headers[\"Proxy-Authorization\"] = %q\n", p.auth())
		}
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			return 0, 0, err
		}
		args = append(args, "-s", script, "http://"+p.proxy.Addr+"/")
	}
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("wrk via %s: %w: %s", p.Name, err, out)
	}
	m := wrkRPS.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("wrk via %s: no Requests/sec in %s", p.Name, out)
	}
	rps, _ := strconv.ParseFloat(string(m[1]), 64)
	bad := 0
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		n, _ := strconv.Atoi(string(m[1]))
		bad += n
	}
	if m := wrkSock.FindSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(string(s))
			bad += n
		}
	}
	return rps, bad, nil
}

// idleResult is the memory a proxy spends on idle tunnels.
type idleResult struct {
	Tunnels        int
	Errors         int
	FirstError     string
	FDsBefore      int
	FDsAfter       int
	RSSBefore      int64
	RSSAfter       int64
	BytesPerTunnel float64
	OpenTime       time.Duration
}

// idleTunnels opens n tunnels through p's proxy to the echo server, proves
// each with one echoed byte, then measures the proxy's resident memory.
func idleTunnels(ctx context.Context, p *path, n, workers int) (idleResult, error) {
	var r idleResult
	runtimeSettle()
	before, err := p.proxy.RSS()
	if err != nil {
		return r, err
	}
	r.RSSBefore = before
	r.FDsBefore = p.proxy.FDs()
	conns := make([]net.Conn, n)
	var (
		next  atomic.Int64
		errs  atomic.Int64
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = time.Now()
		first string
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := func() (net.Conn, error) {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					c, err := p.dial(cctx, p.idle)
					if err != nil {
						return nil, err
					}
					c.SetDeadline(time.Now().Add(10 * time.Second))
					var b [1]byte
					if _, err := c.Write([]byte{'i'}); err != nil {
						c.Close()
						return nil, err
					}
					if _, err := io.ReadFull(c, b[:]); err != nil {
						c.Close()
						return nil, err
					}
					c.SetDeadline(time.Time{})
					return c, nil
				}()
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if first == "" {
						first = err.Error()
					}
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	r.OpenTime = time.Since(start)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	r.Errors = int(errs.Load())
	r.FirstError = first
	r.Tunnels = n - r.Errors
	time.Sleep(time.Second) // let the proxy finish whatever it does per tunnel
	after, err := p.proxy.RSS()
	if err != nil {
		return r, err
	}
	r.RSSAfter = after
	r.FDsAfter = p.proxy.FDs()
	if r.Tunnels > 0 {
		r.BytesPerTunnel = float64(after-before) / float64(r.Tunnels)
	}
	return r, nil
}

func runtimeSettle() { time.Sleep(300 * time.Millisecond) }

// upstream starts the servers one path uses on host, on ports base..base+2.
func upstream(h *testhosts.Host, base int) (bulk, echo, web netip.AddrPort, err error) {
	b, err := h.ServeBulk(base)
	if err != nil {
		return
	}
	e, err := h.ServeTCPEcho(base + 1)
	if err != nil {
		return
	}
	okBody := []byte("ok\n")
	w, err := h.ServeHTTP(base+2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(okBody)
	}))
	if err != nil {
		return
	}
	return b.Addr, e.Addr, w.Addr, nil
}
