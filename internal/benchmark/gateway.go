//go:build linux

package benchmark

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"sync/atomic"
	"syscall"
	"time"
)

// GatewayConfig says what the gateway benchmark measures. Zero values take
// the defaults.
type GatewayConfig struct {
	// Postern is the built postern binary; "" builds ./cmd/postern.
	Postern string
	// Clients registered, each with a policy of its own (default 1000).
	Clients int
	// IdleTunnels held open at once, spread over the clients (default 10000).
	IdleTunnels int
	// SetupSamples connections, each as the next client (default 2000).
	SetupSamples int
	// RPSDuration and RPSConns of each wrk run (default 5s, 16).
	RPSDuration time.Duration
	RPSConns    int
	// PatchSamples changes of one client's policy, each followed by the
	// connection that must see it (default 100; squid's reconfigurations
	// are fewer, PatchSamples/10, at least 3).
	PatchSamples int
	// Skip names proxies not to run ("squid").
	Skip   []string
	Logger *slog.Logger
}

func (c *GatewayConfig) defaults() {
	if c.Clients == 0 {
		c.Clients = 1000
	}
	if c.IdleTunnels == 0 {
		c.IdleTunnels = 10000
	}
	if c.SetupSamples == 0 {
		c.SetupSamples = 2000
	}
	if c.RPSDuration == 0 {
		c.RPSDuration = 5 * time.Second
	}
	if c.RPSConns == 0 {
		c.RPSConns = 16
	}
	if c.PatchSamples == 0 {
		c.PatchSamples = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// Goals of the gateway against squid with the same per-user ACLs, measured
// side by side: ahead on every row, and a policy change visible to the next
// connection within GoalPatchVisible.
const GoalPatchVisible = 10 * time.Millisecond

// GatewayRow is what was measured of one proxy with many clients.
type GatewayRow struct {
	Name string
	Err  string
	// RSSClients is the resident memory with every client registered and
	// no connection open.
	RSSClients int64
	// Setup of a tunnel as the next client each time, to its first echoed byte.
	SetupP50, SetupP99 time.Duration
	RPS                float64
	RPSErrors          int
	Idle               *idleResult
	// PatchVisible is the time from asking for a change of one client's
	// policy to the first connection that sees it (p50, p99, max).
	PatchP50, PatchP99, PatchMax time.Duration
	PatchSamples                 int
	PatchHow                     string
}

// GatewayReport is one run of the gateway benchmark.
type GatewayReport struct {
	Config  GatewayConfig
	Machine Machine
	Rows    []GatewayRow // Rows[0] is the gateway
	Elapsed time.Duration
	Notes   []string
}

// benchClient is one client: its name and token (squid's user and password).
type benchClient struct{ name, token string }

func (c benchClient) basic() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.name+":"+c.token))
}

// patchName, on flipPort, is the destination whose admission the
// policy-change rows flip. The port is outside those the other rows use, so
// that squid's per-user rule for the lab's ports never admits it.
const (
	patchName = "patch.bench.test"
	flipPort  = 12100
)

// RunGateway measures postern's gateway and squid with per-user ACLs side by
// side: both with cfg.Clients clients, each allowed by a rule of its own.
// It needs root. All traffic stays on loopback and the lab's veth links.
func RunGateway(ctx context.Context, cfg GatewayConfig) (*GatewayReport, error) {
	cfg.defaults()
	log := cfg.Logger
	started := time.Now()
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	rep := &GatewayReport{Config: cfg}
	want := []Tool{ToolWrk}
	if !skipped(cfg.Skip, "squid") {
		want = append(want, ToolSquid)
	}
	missing := ensureOrSkip(ctx, want, &rep.Notes, &cfg.Skip)
	_, noWrk := missing[ToolWrk.Program]
	tunnels, err := capIdleTunnels(cfg.IdleTunnels, &rep.Notes)
	if err != nil {
		return nil, err
	}
	cfg.IdleTunnels, rep.Config.IdleTunnels = tunnels, tunnels
	dir, bin, err := workDirWithPostern(ctx, log, "postern-gwbench-", cfg.Postern, true)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	lab, err := newBenchLab(ctx, "gwbench")
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	up := lab.upstream
	rep.Machine = describe(bin)

	clients := make([]benchClient, cfg.Clients)
	names := []string{"postern gateway"}
	if !skipped(cfg.Skip, "squid") {
		names = append(names, "squid")
	}
	paths := make([]*path, len(names))
	var ports []int
	for i := range names {
		base := 12000 + 10*i
		p := &path{Name: names[i], idle: netip.AddrPortFrom(up.Addr, uint16(base+3))}
		if p.bulk, p.echo, p.web, err = upstream(up, base); err != nil {
			return nil, err
		}
		ports = append(ports, base, base+1, base+2, base+3)
		paths[i] = p
	}
	if _, err := up.ServeTCPEcho(flipPort); err != nil {
		return nil, err
	}
	ports = append(ports, flipPort)

	for i := range names {
		row := GatewayRow{Name: names[i]}
		var errs []string
		p := paths[i]
		if i == 0 {
			log.Info("gateway: start and register clients", "clients", cfg.Clients)
		} else {
			log.Info("squid: start with per-user ACLs", "users", cfg.Clients)
		}
		pr, err := func() (*proxyRun, error) {
			if i == 0 {
				return startGatewayBench(ctx, bin, dir, lab, clients, ports)
			}
			return startSquidUsers(ctx, dir, lab, clients)
		}()
		if err != nil {
			row.Err = err.Error()
			rep.Rows = append(rep.Rows, row)
			continue
		}
		p.proxy = pr.proc
		runtimeSettle()
		if row.RSSClients, err = pr.proc.RSS(); err != nil {
			errs = append(errs, err.Error())
		}
		// Each connection as the next client.
		var next atomic.Uint64
		p.auth = func() string { return clients[int(next.Add(1)-1)%len(clients)].basic() }
		log.Info("setup as each client in turn", "path", p.Name, "samples", cfg.SetupSamples)
		if samples, err := setupLatency(ctx, p, cfg.SetupSamples); err != nil {
			errs = append(errs, err.Error())
		} else {
			tot := make([]time.Duration, len(samples))
			for k, s := range samples {
				tot[k] = s.total()
			}
			slices.Sort(tot)
			row.SetupP50, row.SetupP99 = percentile(tot, 0.5), percentile(tot, 0.99)
		}
		if noWrk {
			errs = append(errs, "keep-alive requests "+missing[ToolWrk.Program])
		} else {
			log.Info("keep-alive requests", "path", p.Name, "duration", cfg.RPSDuration, "conns", cfg.RPSConns)
			one := clients[len(clients)/2].basic()
			p.auth = func() string { return one }
			if row.RPS, row.RPSErrors, err = keepAliveRPS(ctx, p, dir, cfg.RPSDuration, cfg.RPSConns); err != nil {
				errs = append(errs, err.Error())
			}
		}
		log.Info("idle tunnels", "path", p.Name, "tunnels", cfg.IdleTunnels)
		p.auth = func() string { return clients[int(next.Add(1)-1)%len(clients)].basic() }
		idle, err := func() (idleResult, error) {
			child, err := startEchoChild(ctx, up, int(p.idle.Port()))
			if err != nil {
				return idleResult{}, err
			}
			defer child.Close()
			return idleTunnels(ctx, p, cfg.IdleTunnels, 64)
		}()
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			row.Idle = &idle
		}
		time.Sleep(2 * time.Second)
		log.Info("policy changes", "path", p.Name)
		n := cfg.PatchSamples
		if i > 0 {
			n = max(3, n/10)
		}
		vis, how, err := pr.flip(ctx, p, n)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			slices.Sort(vis)
			row.PatchP50, row.PatchP99, row.PatchMax = percentile(vis, 0.5), percentile(vis, 0.99), vis[len(vis)-1]
			row.PatchSamples, row.PatchHow = len(vis), how
		}
		pr.proc.Close()
		row.Err = strings.Join(errs, "; ")
		rep.Rows = append(rep.Rows, row)
	}
	rep.Elapsed = time.Since(started)
	return rep, nil
}

// proxyRun is a proxy with many clients, and how to change one client's
// policy on it.
type proxyRun struct {
	proc *proxyProc
	// flip changes whether patchName is admitted for one client n times,
	// each followed by connections until one sees the change, and returns
	// how long each change took to be seen.
	flip func(ctx context.Context, p *path, n int) ([]time.Duration, string, error)
}

var (
	gatewayListening = regexp.MustCompile(`gateway listening"? addr=(\S+)`)
	gatewayAPI       = regexp.MustCompile(`gateway listening.* api=(\S+)`)
)

// startGatewayBench runs `postern gateway` and registers the clients through
// its API, each with a policy of its own: the lab's subnet on the bench's
// ports, and a name of its own.
func startGatewayBench(ctx context.Context, bin, dir string, lab *benchLab, clients []benchClient, ports []int) (*proxyRun, error) {
	home := filepath.Join(dir, "gateway-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	pol := filepath.Join(home, "default.hcl")
	if err := os.WriteFile(pol, []byte("ports = [80, 443]\n"), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "gateway", "--policy", pol, "--listen", "127.0.0.1:0", "--api", "127.0.0.1:0",
		"--resolver", lab.dns.Addr.String(), "--add-host", patchName+":"+lab.upstream.Addr.String(), "--events-per-client", "100")
	cmd.Env = append(os.Environ(), "POSTERN_HOME="+home)
	proc, err := startProxy(ctx, "postern gateway", cmd, "", gatewayListening)
	if err != nil {
		return nil, err
	}
	m := gatewayAPI.FindStringSubmatch(proc.output())
	if m == nil {
		proc.Close()
		return nil, fmt.Errorf("postern gateway did not say where its API is: %s", proc.output())
	}
	apiAddr := strings.Trim(m[1], `"`)
	tok, err := os.ReadFile(filepath.Join(home, "gateway-api-token"))
	if err != nil {
		proc.Close()
		return nil, err
	}
	api := &apiClient{base: "http://" + apiAddr, token: strings.TrimSpace(string(tok)),
		c: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}}
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(p)
	}
	for i := range clients {
		name := fmt.Sprintf("c%04d", i)
		var nc struct{ Token string }
		if err := api.do("POST", "/v1/clients", fmt.Sprintf(`{"name": %q}`, name), 201, &nc); err != nil {
			proc.Close()
			return nil, err
		}
		clients[i] = benchClient{name, nc.Token}
		body := fmt.Sprintf(`{"ports": [%s], "allow": [%q], "allow_cidrs": [%q]}`, strings.Join(ps, ", "), name+".bench.test", lab.Subnet().String())
		if err := api.do("PUT", "/v1/clients/"+name+"/policy", body, 200, nil); err != nil {
			proc.Close()
			return nil, err
		}
	}
	flipper := clients[0]
	return &proxyRun{proc: proc, flip: func(ctx context.Context, p *path, n int) ([]time.Duration, string, error) {
		var out []time.Duration
		for k := 0; k < n; k++ {
			allow := k%2 == 0
			patch := fmt.Sprintf(`{"add_allow": [%q]}`, patchName)
			if !allow {
				patch = fmt.Sprintf(`{"remove_allow": [%q]}`, patchName)
			}
			// The PATCH goes out and connections follow at once, without
			// waiting for its answer: the first that sees the change ends
			// the sample.
			start := time.Now()
			patched := make(chan error, 1)
			go func() { patched <- api.do("PATCH", "/v1/clients/"+flipper.name+"/policy", patch, 200, nil) }()
			err := untilSeen(ctx, p.proxy.Addr, patchName, flipPort, flipper.basic(), allow)
			seen := time.Since(start)
			if perr := <-patched; perr != nil {
				return nil, "", perr
			}
			if err != nil {
				return nil, "", err
			}
			out = append(out, seen)
		}
		return out, "PATCH /v1/clients/NAME/policy", nil
	}}, nil
}

// untilSeen opens connections to name:port through the proxy as a client
// until one is admitted (or refused) as want says, for up to 30s.
func untilSeen(ctx context.Context, proxy, name string, port uint16, auth string, want bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := connectVerdict(ctx, proxy, name, port, auth)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a change of policy was not seen within 30s (CONNECT %s:%d admitted=%v, last error %v)", name, port, got, err)
		}
		if err != nil {
			// A proxy reconfiguring may refuse or reset connections
			// meanwhile: that is part of the time the change takes.
			time.Sleep(time.Millisecond)
		}
	}
}

// connectVerdict says whether the proxy admits one CONNECT to name:port.
func connectVerdict(ctx context.Context, proxy, name string, port uint16, auth string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(cctx, "tcp", proxy)
	if err != nil {
		return false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	target := net.JoinHostPort(name, strconv.Itoa(int(port)))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", target, target, auth)
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf); err != nil {
		return false, fmt.Errorf("CONNECT %s via %s: %w", target, proxy, err)
	}
	switch code := string(buf[9:12]); code {
	case "200":
		return true, nil
	case "403":
		return false, nil
	default:
		return false, fmt.Errorf("CONNECT %s via %s: status %s", target, proxy, code)
	}
}

type apiClient struct {
	base, token string
	c           *http.Client
}

func (a *apiClient) do(method, path, body string, want int, out any) error {
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// startSquidUsers runs squid with basic authentication from a password file
// (basic_ncsa_auth, MD5-crypt hashes made by openssl) and one http_access
// line per user: the same clients, tokens and rules as the gateway's.
func startSquidUsers(ctx context.Context, dir string, lab *benchLab, clients []benchClient) (*proxyRun, error) {
	helper := "/usr/lib/squid/basic_ncsa_auth"
	if _, err := os.Stat(helper); err != nil {
		return nil, fmt.Errorf("squid's basic_ncsa_auth helper is not at %s: %w", helper, err)
	}
	var plain bytes.Buffer
	for _, c := range clients {
		plain.WriteString(c.token + "\n")
	}
	cmd := exec.CommandContext(ctx, "openssl", "passwd", "-1", "-stdin")
	cmd.Stdin = &plain
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hash squid's passwords with openssl passwd -1: %w", err)
	}
	hashes := strings.Fields(string(out))
	if len(hashes) != len(clients) {
		return nil, fmt.Errorf("openssl passwd gave %d hashes for %d passwords", len(hashes), len(clients))
	}
	var pw, acl strings.Builder
	for i, c := range clients {
		fmt.Fprintf(&pw, "%s:%s\n", c.name, hashes[i])
		fmt.Fprintf(&acl, "acl u_%s proxy_auth %s\nacl d_%s dstdomain %s\nhttp_access allow u_%s lab labports\nhttp_access allow u_%s d_%s labports\n",
			c.name, c.name, c.name, c.name+".bench.test", c.name, c.name, c.name)
	}
	pwFile := filepath.Join(dir, "squid-users")
	if err := os.WriteFile(pwFile, []byte(pw.String()), 0o644); err != nil {
		return nil, err
	}
	hosts := filepath.Join(dir, "squid-hosts")
	if err := os.WriteFile(hosts, []byte(lab.upstream.Addr.String()+" "+patchName+"\n"), 0o644); err != nil {
		return nil, err
	}
	flipFile := filepath.Join(dir, "squid-flip.conf")
	flipper := clients[0]
	writeFlip := func(allow bool) error {
		line := "# " + patchName + " not admitted\n"
		if allow {
			line = fmt.Sprintf("acl flip dstdomain %s\nacl flipport port %d\nhttp_access allow u_%s flip flipport\n", patchName, flipPort, flipper.name)
		}
		return os.WriteFile(flipFile, []byte(line), 0o644)
	}
	if err := writeFlip(false); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "squid-users.conf")
	src := fmt.Sprintf(`http_port 127.0.0.1:%d
auth_param basic program %s %s
auth_param basic children 5 startup=5 idle=1
auth_param basic credentialsttl 2 hours
auth_param basic realm postern-bench
acl lab dst %s
acl labports port 12000-12099
%sinclude %s
http_access deny all
`, port, helper, pwFile, lab.Subnet(), acl.String(), flipFile) + squidSettings(dir, lab.dns.Addr.Addr().String(), hosts)
	if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
		return nil, err
	}
	proc, err := startProxy(ctx, "squid", exec.Command("squid", "-N", "-f", conf), fmt.Sprintf("127.0.0.1:%d", port), nil)
	if err != nil {
		return nil, err
	}
	return &proxyRun{proc: proc, flip: func(ctx context.Context, p *path, n int) ([]time.Duration, string, error) {
		var out []time.Duration
		for k := 0; k < n; k++ {
			allow := k%2 == 0
			start := time.Now()
			if err := writeFlip(allow); err != nil {
				return nil, "", err
			}
			// What 'squid -k reconfigure' sends.
			if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				return nil, "", err
			}
			if err := untilSeen(ctx, proc.Addr, patchName, flipPort, flipper.basic(), allow); err != nil {
				return nil, "", err
			}
			out = append(out, time.Since(start))
			time.Sleep(500 * time.Millisecond) // let the helpers settle before the next
		}
		return out, "rewrite an included ACL file, then SIGHUP (squid -k reconfigure)", nil
	}}, nil
}

// Markdown writes the gateway report as a table, ratios to squid beside
// the absolute figures.
func (r *GatewayReport) Markdown(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	c := r.Config
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d MiB RAM, Linux %s, %s.  \n", m.Cores, m.CPU, m.MemMiB, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Proxies: %s; %s.  \n", orNA(m.Postern, "postern"), m.Squid)
	fmt.Fprintf(&b, "Run: %d clients, each with a policy (squid: an ACL pair and http_access line per user) of its own; %d setups, each as the next client; wrk %s × %d connections as one client; %d idle tunnels over all the clients; %d policy changes; took %s.\n\n",
		c.Clients, c.SetupSamples, c.RPSDuration, c.RPSConns, c.IdleTunnels, c.PatchSamples, r.Elapsed.Round(time.Second))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s.\n\n", n)
	}
	if len(r.Rows) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	g := r.Rows[0]
	var sq *GatewayRow
	if len(r.Rows) > 1 {
		sq = &r.Rows[1]
	}
	ratio := func(x, y float64, lowerBetter bool) string {
		if x == 0 || y == 0 {
			return "–"
		}
		v := x / y
		if lowerBetter {
			v = y / x
		}
		return fmt.Sprintf("%.2f×", v)
	}
	val := func(f func(GatewayRow) string, row *GatewayRow) string {
		if row == nil {
			return "–"
		}
		return f(*row)
	}
	type line struct {
		what        string
		fmt         func(GatewayRow) string
		num         func(GatewayRow) float64
		lowerBetter bool
	}
	perTunnel := func(x GatewayRow) float64 {
		if x.Idle == nil {
			return 0
		}
		return x.Idle.BytesPerTunnel / 1024
	}
	lines := []line{
		{"memory with every client registered, MiB", func(x GatewayRow) string { return fmt.Sprintf("%.1f", float64(x.RSSClients)/(1<<20)) },
			func(x GatewayRow) float64 { return float64(x.RSSClients) }, true},
		{"tunnel setup as the next client, p50, µs", func(x GatewayRow) string { return us(x.SetupP50) }, func(x GatewayRow) float64 { return float64(x.SetupP50) }, true},
		{"tunnel setup as the next client, p99, µs", func(x GatewayRow) string { return us(x.SetupP99) }, func(x GatewayRow) float64 { return float64(x.SetupP99) }, true},
		{"keep-alive requests/s", func(x GatewayRow) string { return fmt.Sprintf("%.0f (%d failed)", x.RPS, x.RPSErrors) }, func(x GatewayRow) float64 { return x.RPS }, false},
		{"memory per idle tunnel, KiB", func(x GatewayRow) string {
			if x.Idle == nil {
				return "–"
			}
			return fmt.Sprintf("%.1f (%d open, %d failed)", perTunnel(x), x.Idle.Tunnels, x.Idle.Errors)
		}, perTunnel, true},
		{"policy change seen by the next connection, p50, µs", func(x GatewayRow) string { return us(x.PatchP50) }, func(x GatewayRow) float64 { return float64(x.PatchP50) }, true},
		{"policy change seen by the next connection, p99, µs", func(x GatewayRow) string { return us(x.PatchP99) }, func(x GatewayRow) float64 { return float64(x.PatchP99) }, true},
		{"policy change seen by the next connection, max, µs", func(x GatewayRow) string { return us(x.PatchMax) }, func(x GatewayRow) float64 { return float64(x.PatchMax) }, true},
	}
	b.WriteString("| | postern gateway | squid, per-user ACLs | gateway ahead by |\n|---|---:|---:|---:|\n")
	for _, l := range lines {
		sqv := 0.0
		if sq != nil {
			sqv = l.num(*sq)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", l.what, l.fmt(g), val(l.fmt, sq), ratio(l.num(g), sqv, l.lowerBetter))
	}
	b.WriteString("\n\"Ahead by\" is squid's figure over the gateway's where less is better, the gateway's over squid's where more is better: above 1× the gateway is ahead.\n")
	fmt.Fprintf(&b, "A policy change is %s for the gateway", g.PatchHow)
	if sq != nil && sq.PatchHow != "" {
		fmt.Fprintf(&b, " and %s for squid (%d samples)", sq.PatchHow, sq.PatchSamples)
	}
	fmt.Fprintf(&b, "; the time runs from the request to the first new connection judged by the new policy. Goal: at most %s µs at p99 (gateway: %s µs at p50, %s µs at p99, %s µs at most: %s).\n",
		us(GoalPatchVisible), us(g.PatchP50), us(g.PatchP99), us(g.PatchMax), yes(g.PatchP99 > 0 && g.PatchP99 <= GoalPatchVisible))
	for _, row := range r.Rows {
		if row.Err != "" {
			fmt.Fprintf(&b, "\n%s: not all measured: %s\n", row.Name, row.Err)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
