//go:build linux

package benchmark

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/testhosts"
)

// Config says what to measure and how much. Zero values take the defaults.
type Config struct {
	// Postern is the built postern binary; "" builds ./cmd/postern from the
	// module root (the working directory).
	Postern string
	// BulkBytes per throughput run (default 1 GiB), BulkRuns runs (default 5).
	BulkBytes int64
	BulkRuns  int
	// LatencySamples connections per path (default 2000).
	LatencySamples int
	// IdleSetupSamples connections per path opened after IdleGap with nothing
	// going on (default 200 after 20ms).
	IdleSetupSamples int
	IdleGap          time.Duration
	// RPSDuration of each wrk run (default 5s), RPSConns keep-alive
	// connections (default 16).
	RPSDuration time.Duration
	RPSConns    int
	// IdleTunnels held open at once per proxy (default 10000).
	IdleTunnels int
	// Skip names proxies not to run ("squid", "tinyproxy", "door",
	// "baseline").
	Skip   []string
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.BulkBytes == 0 {
		c.BulkBytes = 1 << 30
	}
	if c.BulkRuns == 0 {
		c.BulkRuns = 5
	}
	if c.LatencySamples == 0 {
		c.LatencySamples = 2000
	}
	if c.IdleSetupSamples == 0 {
		c.IdleSetupSamples = 200
	}
	if c.IdleGap == 0 {
		c.IdleGap = 20 * time.Millisecond
	}
	if c.RPSDuration == 0 {
		c.RPSDuration = 5 * time.Second
	}
	if c.RPSConns == 0 {
		c.RPSConns = 16
	}
	if c.IdleTunnels == 0 {
		c.IdleTunnels = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// PathResult is everything measured on one path.
type PathResult struct {
	Name       string
	Err        string  // why the path was not (fully) measured
	Throughput float64 // bytes per second, median of the rounds
	// ThroughputRatio is the median of the rounds' ratios to the direct
	// path's throughput in the same round; 0 when either path failed.
	ThroughputRatio float64
	// CPUPerGiB is the CPU time the whole machine spent per GiB moved, in
	// seconds: client, proxy, server and kernel (median of the rounds).
	CPUPerGiB float64
	LatP50    time.Duration
	LatP99    time.Duration
	// The medians of each step of a setup sample: the TCP connect (to the
	// proxy, or direct to the upstream), the CONNECT exchange, the first
	// byte's echo.
	ConnectP50, Connect200P50, EchoP50 time.Duration
	// IdleLatP50 and IdleLatP99 are setups opened after the machine idled
	// (Config.IdleGap before each).
	IdleLatP50, IdleLatP99 time.Duration
	RPS                    float64
	RPSErrors              int
	Idle                   *idleResult
	// ConnectOnly paths have no keep-alive or idle-tunnel rows.
	ConnectOnly bool
}

// Report is one run's results.
type Report struct {
	Config  Config
	Machine Machine
	Paths   []PathResult // Paths[0] is direct
	Elapsed time.Duration
	Notes   []string
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int
	Kernel    string
	Go        string
	CPU       string
	MemMiB    int64
	Squid     string
	Tinyproxy string
	Postern   string
}

// ErrNeedsRoot is returned when the run cannot make test hosts.
var ErrNeedsRoot = testhosts.ErrNeedsRoot

// Run measures every path in turn and returns the report. It needs root (test
// hosts, the file limit). All traffic stays on loopback and the lab's veth
// links.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	log := cfg.Logger
	started := time.Now()
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	// 10,000 tunnels hold 20,000 sockets here (client and upstream ends) and
	// as many in the proxy: raise the limit, for us and the proxies we start.
	rep := &Report{Config: cfg}
	// squid, tinyproxy and wrk: installed here when we can, else their rows
	// are named as not measured, and why.
	var want []Tool
	for _, t := range []Tool{ToolSquid, ToolTinyproxy} {
		if !skipped(cfg.Skip, t.Program) {
			want = append(want, t)
		}
	}
	missing := ensureOrSkip(ctx, append(want, ToolWrk), &rep.Notes, &cfg.Skip)
	_, noWrk := missing[ToolWrk.Program]
	tunnels, err := capIdleTunnels(cfg.IdleTunnels, &rep.Notes)
	if err != nil {
		return nil, err
	}
	cfg.IdleTunnels, rep.Config.IdleTunnels = tunnels, tunnels

	// The directory is readable by everyone: squid and tinyproxy drop to
	// nobody/proxy.
	dir, bin, err := workDirWithPostern(ctx, log, "postern-bench-", cfg.Postern, !skipped(cfg.Skip, "door"))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	lab, err := newBenchLab(ctx, "bench")
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	up, dns := lab.upstream, lab.dns

	rep.Machine = describe(bin)
	type pending struct {
		name  string
		start func() (*proxyProc, error)
	}
	paths := []*path{{Name: "direct"}}
	var ports []int
	plan := []pending{
		{"door", func() (*proxyProc, error) {
			return startDoor(ctx, bin, dir, lab.Subnet().String(), dns.Addr.String(), ports)
		}},
		{"squid", func() (*proxyProc, error) { return startSquid(ctx, dir, dns.Addr.Addr().String()) }},
		{"tinyproxy", func() (*proxyProc, error) { return startTinyproxy(ctx, dir) }},
		{"baseline", func() (*proxyProc, error) { return startBaseline(ctx) }},
	}
	for _, pl := range plan {
		if !skipped(cfg.Skip, pl.name) {
			paths = append(paths, &path{Name: pl.name})
		}
	}
	for i, p := range paths {
		base := 10000 + 10*i
		ports = append(ports, base, base+1, base+2, base+3)
		p.idle = netip.AddrPortFrom(up.Addr, uint16(base+3))
		if p.bulk, p.echo, p.web, err = upstream(up, base); err != nil {
			return nil, err
		}
	}
	for _, p := range paths[1:] {
		for _, pl := range plan {
			if pl.name != p.Name {
				continue
			}
			pp, err := pl.start()
			if err != nil {
				return nil, fmt.Errorf("start %s: %w", pl.name, err)
			}
			defer pp.Close()
			p.proxy = pp
			switch p.Name {
			case "door":
				p.Name = "postern door"
			case "baseline":
				p.Name = baselineName
				p.connectOnly = true
			}
		}
	}

	results := make([]PathResult, len(paths))
	errs := make([][]string, len(paths))
	for i, p := range paths {
		results[i].Name = p.Name
	}
	if err := interleaved(ctx, log, cfg, paths, results, errs); err != nil {
		return nil, err
	}
	log.Info("setup after idling", "samples", cfg.IdleSetupSamples, "gap", cfg.IdleGap)
	idle, idleErrs := idleSetups(ctx, paths, cfg.IdleSetupSamples, cfg.IdleGap)
	for i := range paths {
		if idleErrs[i] != nil {
			errs[i] = append(errs[i], idleErrs[i].Error())
		}
		results[i].IdleLatP50, results[i].IdleLatP99 = percentile(idle[i], 0.50), percentile(idle[i], 0.99)
	}
	for i, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res := results[i]
		res.ConnectOnly = p.connectOnly
		if p.connectOnly {
			rep.Paths = append(rep.Paths, res)
			continue
		}
		if noWrk {
			errs[i] = append(errs[i], "keep-alive requests "+missing[ToolWrk.Program])
		} else {
			log.Info("keep-alive requests", "path", p.Name, "duration", cfg.RPSDuration, "conns", cfg.RPSConns)
			if res.RPS, res.RPSErrors, err = keepAliveRPS(ctx, p, dir, cfg.RPSDuration, cfg.RPSConns); err != nil {
				errs[i] = append(errs[i], err.Error())
			}
		}
		if !p.direct() {
			log.Info("idle tunnels", "path", p.Name, "tunnels", cfg.IdleTunnels)
			idle, err := func() (idleResult, error) {
				child, err := startEchoChild(ctx, up, int(p.idle.Port()))
				if err != nil {
					return idleResult{}, err
				}
				defer child.Close()
				return idleTunnels(ctx, p, cfg.IdleTunnels, 64)
			}()
			if err != nil {
				errs[i] = append(errs[i], err.Error())
			} else {
				res.Idle = &idle
			}
			// Let the tunnels' sockets close before the next proxy starts.
			time.Sleep(2 * time.Second)
		}
		res.Err = strings.Join(errs[i], "; ")
		rep.Paths = append(rep.Paths, res)
	}
	rep.Elapsed = time.Since(started)
	return rep, nil
}

// interleaved measures bulk throughput and connection setup in rounds that
// each visit every path once, starting one path further on each round, so a
// change in the machine's load during the run falls on every path alike
// rather than on whichever was measured at the time. A path's throughput
// ratio is the median of its per-round ratios to the direct path.
func interleaved(ctx context.Context, log *slog.Logger, cfg Config, paths []*path, results []PathResult, errs [][]string) error {
	rounds := cfg.BulkRuns
	perRound := max(cfg.LatencySamples/rounds, 1)
	rates := make([][]float64, len(paths))
	cpus := make([][]float64, len(paths))
	lats := make([][]setupPhases, len(paths))
	failed := make([]bool, len(paths))
	for r := 0; r < rounds; r++ {
		log.Info("throughput and setup latency", "round", r+1, "of", rounds, "bytes", cfg.BulkBytes, "samples", perRound)
		for k := range paths {
			if err := ctx.Err(); err != nil {
				return err
			}
			i := (r + k) % len(paths)
			if failed[i] {
				continue
			}
			p := paths[i]
			rate, cpu, err := throughput(ctx, p, cfg.BulkBytes, 1)
			if err == nil {
				var lat []setupPhases
				lat, err = setupLatency(ctx, p, perRound)
				lats[i] = append(lats[i], lat...)
			}
			if err != nil {
				errs[i] = append(errs[i], err.Error())
				failed[i] = true
				continue
			}
			rates[i] = append(rates[i], rate)
			if cpu > 0 {
				cpus[i] = append(cpus[i], cpu)
			}
		}
	}
	for i := range paths {
		res := &results[i]
		if len(rates[i]) > 0 {
			res.Throughput = median(rates[i])
		}
		if !failed[0] && !failed[i] {
			ratios := make([]float64, len(rates[i]))
			for r := range ratios {
				ratios[r] = rates[i][r] / rates[0][r]
			}
			res.ThroughputRatio = median(ratios)
		}
		if len(cpus[i]) > 0 {
			res.CPUPerGiB = median(cpus[i])
		}
		totals := make([]time.Duration, len(lats[i]))
		for k, ph := range lats[i] {
			totals[k] = ph.total()
		}
		slices.Sort(totals)
		res.LatP50, res.LatP99 = percentile(totals, 0.50), percentile(totals, 0.99)
		res.ConnectP50, res.Connect200P50, res.EchoP50 = phaseP50s(lats[i])
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func skipped(skip []string, name string) bool {
	for _, s := range skip {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return true
		}
	}
	return false
}

func describe(postern string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemMiB = int64(si.Totalram) * int64(si.Unit) >> 20
	}
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil && len(out) == 0 {
			return "unavailable"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	m.Squid = first("squid", "-v")
	m.Tinyproxy = first("tinyproxy", "-v")
	if postern != "" {
		m.Postern = first(postern, "--version")
	}
	return m
}

// raiseFileLimit sets the open-file limit (soft and hard) to want, or, where
// the hard limit cannot be raised, the soft limit to the hard one. Processes
// started afterwards inherit it. It returns the limit in force.
func raiseFileLimit(want uint64) (uint64, error) {
	lim := unix.Rlimit{Cur: want, Max: want}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		return want, nil
	}
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read open-file limit: %w", err)
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise open-file soft limit to %d: %w", lim.Max, err)
	}
	return lim.Max, nil
}
