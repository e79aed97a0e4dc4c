//go:build linux

package benchmark

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/postern-dev/postern/internal/testhosts"
)

// SRTPackage is the sandbox-runtime release the wall is compared with.
const SRTPackage = "@anthropic-ai/sandbox-runtime@0.0.83"

// Goals the wall is held to.
const (
	GoalWallStartOverhead = 10 * time.Millisecond // postern run -- true, over bare true (p50)
	GoalSRTOverPostern    = 5.0                   // srt -c true ÷ postern run -- true (p50)
)

// WallConfig says what the wall benchmark measures and how much. Zero values
// take the defaults.
type WallConfig struct {
	// Postern is the built postern binary; "" builds ./cmd/postern from the
	// module root (the working directory).
	Postern string
	// Startups is how many times each start-up command runs (default 20),
	// after two unmeasured runs each.
	Startups int
	// SRT is the srt executable. "" installs SRTPackage with npm into
	// SRTCache (once; later runs reuse it). NoSRT leaves srt out.
	SRT      string
	SRTCache string
	NoSRT    bool
	// BulkBytes per throughput run (default 256 MiB), BulkRuns runs (default 5), the paths taking turns.
	BulkBytes int64
	BulkRuns  int
	// SetupSamples connections per path (default 500).
	SetupSamples int
	Logger       *slog.Logger
}

func (c *WallConfig) defaults() {
	if c.Startups == 0 {
		c.Startups = 20
	}
	if c.BulkBytes == 0 {
		c.BulkBytes = 256 << 20
	}
	if c.BulkRuns == 0 {
		c.BulkRuns = 5
	}
	if c.SetupSamples == 0 {
		c.SetupSamples = 500
	}
	if c.SRTCache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		c.SRTCache = filepath.Join(dir, "postern-bench", "srt-0.0.83")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// StartupResult is the wall-clock time, from exec to exit, of one command
// that does nothing (`true`) run bare or inside a sandbox, and what the
// kernel counted of it and of every process it waited for: the processor
// time they took (user and system), their page faults and the times they
// gave up the processor. On a machine of few cores a start-up is bounded
// by the processor time its processes take as much as by what they wait
// for, so the two are read side by side.
type StartupResult struct {
	Name     string
	Command  string
	Samples  []time.Duration // sorted; empty when the command could not run
	CPU      []time.Duration // user + system, sorted
	Faults   []int64         // minor page faults, sorted
	Switches []int64         // voluntary context switches, sorted
	Err      string          // why it was not measured
	// FirstTries says how its unmeasured first start failed before one
	// worked; "" when the first worked.
	FirstTries string
}

// startTries is how many times a command may try its first, unmeasured
// start before it is reported as not measured.
const startTries = 3

// Mean of the samples.
func (s StartupResult) Mean() time.Duration {
	if len(s.Samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s.Samples {
		sum += d
	}
	return sum / time.Duration(len(s.Samples))
}

// P50 of the samples.
func (s StartupResult) P50() time.Duration { return percentile(s.Samples, 0.50) }

// P90 of the samples.
func (s StartupResult) P90() time.Duration { return percentile(s.Samples, 0.90) }

// CPUP50 is the median processor time of a run.
func (s StartupResult) CPUP50() time.Duration { return percentile(s.CPU, 0.50) }

// countP50 is the median of sorted counts, taken as percentile takes it.
func countP50(sorted []int64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)/2]
}

// WallPath is what was measured on one network path to the upstream host.
type WallPath struct {
	Name       string
	Throughput float64 // bytes per second, median of the runs
	SetupP50   time.Duration
	SetupP99   time.Duration
	Err        string
}

// WallReport is one wall benchmark run.
type WallReport struct {
	Config  WallConfig
	Machine Machine
	Bwrap   string
	SRT     string // version, or why it is missing
	Node    string
	Startup []StartupResult // bare first
	Paths   []WallPath      // direct first
	Notes   []string
	Elapsed time.Duration
}

// startup names, in the order of the report.
const (
	startBare    = "bare"
	startBwrap   = "bwrap"
	startPostern = "postern"
	// postern with the Go init as pid 1 (POSTERN_WALL_INIT=go).
	startPosternGoInit = "postern-goinit"
	startSRT           = "srt"
	// The same, but sandbox-runtime, started as an unprivileged user
	// (benchUID): postern's and bubblewrap's user-namespace lanes.
	startBareUser    = "bare-user"
	startBwrapUser   = "bwrap-user"
	startPosternUser = "postern-user"
	// The same with the Go init in a user namespace of its own, as that
	// user's runs were set up before postern entered one itself
	// (carry/netwall/ownns).
	startPosternUserGoInit = "postern-user-goinit"
)

// benchUID is the unprivileged user the second set of start-ups runs as.
const benchUID = 65534

// baseOf names the row a start-up's "over bare" is taken from.
func baseOf(name string) string {
	switch name {
	case startBareUser, startBwrapUser, startPosternUser, startPosternUserGoInit:
		return startBareUser
	}
	return startBare
}

// RunWall measures the wall: the start-up cost of `postern run -- true` beside
// bare `true`, bubblewrap and sandbox-runtime, and bulk throughput and
// connection setup from a client behind the wall against the same client in
// a plain network namespace. It needs root. All traffic stays on the test
// hosts' links and inside the run's own namespace.
func RunWall(ctx context.Context, cfg WallConfig) (*WallReport, error) {
	cfg.defaults()
	log := cfg.Logger
	started := time.Now()
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	dir, bin, err := workDirWithPostern(ctx, log, "postern-wallbench-", cfg.Postern, true)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	rep := &WallReport{Config: cfg, Machine: describe(bin)}
	loadStart := loadAverage()

	// The run's working directory stays visible inside the wall (its /tmp is
	// otherwise empty), so the client binary goes there.
	client := filepath.Join(dir, "wallbench-client")
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := testhosts.CopyExecutable(self, client); err != nil {
		return nil, err
	}

	home := filepath.Join(dir, "home")
	env := append(os.Environ(), "POSTERN_HOME="+home)
	log.Info("measuring the machine", "postern", bin)
	if out, err := runIn(ctx, dir, env, bin, "machine", "probe-confinement", "local"); err != nil {
		return nil, fmt.Errorf("postern machine probe-confinement local: %w\n%s", err, out)
	}

	// bubblewrap, and what sandbox-runtime needs on Linux: installed here
	// when we can, else their rows are named as not measured, and why.
	tools := []Tool{ToolBwrap}
	if !cfg.NoSRT {
		tools = append(tools, ToolRipgrep, ToolSocat)
		if cfg.SRT == "" {
			tools = append(tools, ToolNpm)
		}
	}
	missing := EnsureTools(ctx, os.Stderr, tools)
	// Their versions once they are installed.
	rep.Bwrap = firstLine(exec.CommandContext(ctx, "bwrap", "--version"))
	rep.Node = firstLine(exec.CommandContext(ctx, "node", "--version"))
	srt := cfg.SRT
	var srtErr string
	for _, t := range tools[1:] {
		if why, ok := missing[t.Program]; ok && srtErr == "" {
			srtErr = why
		}
	}
	switch {
	case cfg.NoSRT:
		srtErr = "left out (-no-srt)"
	case srtErr != "":
	case srt == "":
		log.Info("installing sandbox-runtime", "package", SRTPackage, "into", cfg.SRTCache)
		if srt, err = installSRT(ctx, cfg.SRTCache); err != nil {
			srtErr = err.Error()
		}
	}
	srtSettings := filepath.Join(dir, "srt-settings.json")
	if err := os.WriteFile(srtSettings, []byte(`{"network":{"allowedDomains":[],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":[],"denyWrite":[]}}`+"\n"), 0o644); err != nil {
		return nil, err
	}
	if srt != "" {
		rep.SRT = SRTPackage + ", " + firstLine(exec.CommandContext(ctx, srt, "--version"))
	} else {
		rep.SRT = "not run: " + srtErr
	}

	cmds := []startCmd{
		{name: startBare, argv: []string{"true"}},
		{name: startBwrap, argv: []string{"bwrap", "--unshare-net", "--ro-bind", "/", "/", "true"}, skip: missing[ToolBwrap.Program]},
		{name: startPostern, argv: []string{bin, "run", "--", "true"}, show: "postern run -- true", env: env},
		// The same build with the Go init as the run's pid 1, as every
		// wall had it before postern set walls up itself: the two side by
		// side in one run.
		{name: startPosternGoInit, argv: []string{bin, "run", "--", "true"}, show: "postern run -- true (POSTERN_WALL_INIT=go)",
			env: append(env[:len(env):len(env)], "POSTERN_WALL_INIT=go")},
		{name: startSRT, argv: []string{srt, "-s", srtSettings, "-c", "true"}, show: "srt -c true", skip: srtErr},
	}
	cmds = append(cmds, unprivilegedStartups(ctx, log, dir, bin, missing[ToolBwrap.Program])...)
	log.Info("start-up", "commands", len(cmds), "runs", cfg.Startups)
	rep.Startup = measureStartups(ctx, dir, cmds, cfg.Startups)

	log.Info("making test hosts")
	paths, err := wallPaths(ctx, cfg, dir, bin, client, env)
	if err != nil {
		return nil, err
	}
	rep.Paths = paths
	rep.Elapsed = time.Since(started)
	// Every figure here is wall-clock time on a machine that may be doing
	// other work; the load says how much.
	rep.Notes = append(rep.Notes, fmt.Sprintf("load average (1 min) %s at the start, %s at the end, on %d cores", loadStart, loadAverage(), rep.Machine.Cores))
	return rep, nil
}

// startCmd is one command of the start-up comparison.
type startCmd struct {
	name string
	argv []string
	show string // how the report names it; "" joins argv
	env  []string
	skip string // why it cannot run
	dir  string // where it runs; "" for the benchmark's directory
	cred *syscall.Credential
}

// unprivilegedStartups are bare `true`, bubblewrap with a user namespace and
// `postern run -- true` as benchUID, in a directory and a home of that user's
// own under dir, with postern copied there and the machine probed as that
// user. Where the probe fails (user namespaces refused to that user, say),
// postern's row says why; bwrapSkip is why bubblewrap cannot run at all.
func unprivilegedStartups(ctx context.Context, log *slog.Logger, dir, bin, bwrapSkip string) []startCmd {
	cred := &syscall.Credential{Uid: benchUID, Gid: benchUID, NoSetGroups: false, Groups: []uint32{}}
	who := fmt.Sprintf(" (uid %d)", benchUID)
	cmds := []startCmd{
		{name: startBareUser, argv: []string{"true"}, show: "true" + who, cred: cred},
		{name: startBwrapUser, argv: []string{"bwrap", "--unshare-user", "--unshare-net", "--ro-bind", "/", "/", "true"},
			show: "bwrap --unshare-user --unshare-net --ro-bind / / true" + who, skip: bwrapSkip, cred: cred},
		{name: startPosternUser, argv: []string{"", "run", "--", "true"}, show: "postern run -- true" + who, cred: cred},
		{name: startPosternUserGoInit, argv: []string{"", "run", "--", "true"}, show: "postern run -- true" + who[:len(who)-1] + ", POSTERN_WALL_INIT=go)", cred: cred},
	}
	own := filepath.Join(dir, "unprivileged")
	work, home, tmp := filepath.Join(own, "work"), filepath.Join(own, "home"), filepath.Join(own, "tmp")
	// That user's own environment, nothing of root's (an XDG_CONFIG_HOME
	// under /root would be a config file it may not read, or root's own).
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "USER=nobody", "LOGNAME=nobody",
		"POSTERN_HOME=" + filepath.Join(home, "postern")}
	for i := range cmds {
		cmds[i].dir, cmds[i].env = "/", env
	}
	pst, goInit := &cmds[2], &cmds[3]
	pst.argv[0] = filepath.Join(own, "postern")
	pst.dir = work
	goInit.argv[0], goInit.dir = pst.argv[0], work
	goInit.env = append(env[:len(env):len(env)], "POSTERN_WALL_INIT=go")
	err := func() error {
		for _, d := range []string{own, work, home, tmp} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := os.Chown(d, benchUID, benchUID); err != nil {
				return err
			}
		}
		if err := testhosts.CopyExecutable(bin, pst.argv[0]); err != nil {
			return err
		}
		log.Info("measuring the machine as an unprivileged user", "uid", benchUID)
		probe := exec.CommandContext(ctx, pst.argv[0], "machine", "probe-confinement", "local")
		probe.Dir, probe.Env = work, pst.env
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := probe.CombinedOutput(); err != nil {
			return fmt.Errorf("postern machine probe-confinement local as uid %d: %w: %s", benchUID, err, lastLines(string(out), 3))
		}
		return nil
	}()
	if err != nil {
		pst.skip, goInit.skip = err.Error(), err.Error()
	}
	return cmds
}

// measureStartups runs each command once to see that it works, twice more
// unmeasured, then n times measured, round-robin so that noise spreads evenly.
func measureStartups(ctx context.Context, dir string, cmds []startCmd, n int) []StartupResult {
	res := make([]StartupResult, len(cmds))
	live := make([]bool, len(cmds))
	for i, c := range cmds {
		res[i] = StartupResult{Name: c.name, Command: c.show}
		if res[i].Command == "" {
			res[i].Command = strings.Join(c.argv, " ")
		}
		if c.skip != "" {
			res[i].Err = c.skip
			continue
		}
		if _, err := exec.LookPath(c.argv[0]); err != nil {
			res[i].Err = fmt.Sprintf("%s not found: %v", c.argv[0], err)
			continue
		}
		// A command whose own start races itself may fail once in a slow
		// minute (sandbox-runtime gives its socat bridges 0.6 s in all):
		// it gets startTries, and the report tells a failed first try
		// beside its figures. A measured run that fails ends its row.
		var failed []string
		for try := 0; try < startTries; try++ {
			_, out, err := timeCommand(ctx, dir, c, nil)
			if err == nil {
				live[i] = true
				break
			}
			failed = append(failed, fmt.Sprintf("%v: %s", err, lastLines(out, 3)))
		}
		switch {
		case !live[i]:
			res[i].Err = fmt.Sprintf("%s failed %d times; the first: %s", res[i].Command, len(failed), failed[0])
		case len(failed) > 0:
			res[i].FirstTries = fmt.Sprintf("its first %d start(s) failed, then one worked; the first: %s", len(failed), failed[0])
		}
	}
	for round := -2; round < n; round++ {
		for i, c := range cmds {
			if !live[i] || ctx.Err() != nil {
				continue
			}
			var ru syscall.Rusage
			d, out, err := timeCommand(ctx, dir, c, &ru)
			if err != nil {
				res[i].Err = fmt.Sprintf("%s failed on run %d: %v: %s", res[i].Command, round+3, err, lastLines(out, 3))
				res[i].Samples, res[i].CPU, res[i].Faults, res[i].Switches = nil, nil, nil, nil
				live[i] = false
				continue
			}
			if round >= 0 {
				r := &res[i]
				r.Samples = append(r.Samples, d)
				r.CPU = append(r.CPU, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))
				r.Faults = append(r.Faults, ru.Minflt)
				r.Switches = append(r.Switches, ru.Nvcsw)
			}
		}
	}
	for i := range res {
		r := &res[i]
		slices.Sort(r.Samples)
		slices.Sort(r.CPU)
		slices.Sort(r.Faults)
		slices.Sort(r.Switches)
	}
	return res
}

// timeCommand runs c with no input and returns the time from start to exit;
// ru, if not nil, gets what the kernel counted of it and of the processes it
// waited for.
func timeCommand(ctx context.Context, dir string, c startCmd, ru *syscall.Rusage) (time.Duration, string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.argv[0], c.argv[1:]...)
	cmd.Dir = dir
	if c.dir != "" {
		cmd.Dir = c.dir
	}
	cmd.Env = c.env
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if ru != nil && cmd.ProcessState != nil {
		if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			*ru = *u
		}
	}
	return d, out.String(), err
}

// installSRT installs SRTPackage under cache with npm, unless it is there, and
// returns the srt executable.
func installSRT(ctx context.Context, cache string) (string, error) {
	srt := filepath.Join(cache, "node_modules", ".bin", "srt")
	if _, err := os.Stat(srt); err == nil {
		return srt, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("npm not found (apt-get install npm), so %s could not be installed", SRTPackage)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", cache, SRTPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("npm install %s: %v: %s", SRTPackage, err, lastLines(string(out), 5))
	}
	if _, err := os.Stat(srt); err != nil {
		return "", fmt.Errorf("npm install %s left no %s", SRTPackage, srt)
	}
	return srt, nil
}

// Ports of the upstream servers. They are not 80 or 443, so the door connects
// upstream first and checks the client's first bytes as they pass.
const (
	wallBulkPort = 7001
	wallEchoPort = 7002
)

// wallPaths measures the client directly from a plain network namespace wired
// to the upstream host by its own veth pair, then as the command of
// `postern run` whose policy admits the upstream host's /24.
func wallPaths(ctx context.Context, cfg WallConfig, dir, bin, client string, env []string) ([]WallPath, error) {
	lab, err := newBenchLab(ctx, "wallbench")
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	up, dns := lab.upstream, lab.dns
	cl, err := lab.Host(ctx, "client")
	if err != nil {
		return nil, err
	}
	bulk, err := up.ServeBulk(wallBulkPort)
	if err != nil {
		return nil, err
	}
	echo, err := up.ServeTCPEcho(wallEchoPort)
	if err != nil {
		return nil, err
	}
	if err := wireDirect(lab.Subnet(), cl, up); err != nil {
		return nil, err
	}

	pol := filepath.Join(dir, "wall-policy.hcl")
	src := fmt.Sprintf("mode = \"enforce\"\nports = [%d, %d]\nallow_cidrs = [%q]\n", wallBulkPort, wallEchoPort, up.Prefix.Masked())
	if err := os.WriteFile(pol, []byte(src), 0o644); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	paths := []struct {
		WallPath
		cmd func() *exec.Cmd
		res clientResult
	}{
		{WallPath: WallPath{Name: "direct (plain netns, veth)"}, cmd: func() *exec.Cmd { return cl.Command(cctx, client) }},
		{WallPath: WallPath{Name: "through the wall (postern run)"}, cmd: func() *exec.Cmd {
			return exec.CommandContext(cctx, bin, "run", "--quiet", "--policy", pol, "--resolver", dns.Addr.String(),
				"--", "./"+filepath.Base(client))
		}},
	}
	// The paths take turns, one bulk run and a share of the setups each, so
	// that whatever else the machine does falls on both alike.
	rounds := cfg.BulkRuns
	for r := 0; r < rounds; r++ {
		job := clientJob{Bulk: bulk.Addr.String(), BulkBytes: cfg.BulkBytes, BulkRuns: 1,
			Echo: echo.Addr.String(), SetupSamples: share(cfg.SetupSamples, rounds, r)}
		raw, err := json.Marshal(job)
		if err != nil {
			return nil, err
		}
		jobEnv := append(slices.Clip(env), wallClientEnv+"="+string(raw))
		for i := range paths {
			p := &paths[i]
			if p.Err != "" {
				continue
			}
			cfg.Logger.Info("throughput and setup", "path", p.Name, "round", r+1, "of", rounds, "bytes", cfg.BulkBytes, "samples", job.SetupSamples)
			res, err := runClientCmd(p.cmd(), dir, jobEnv)
			if err != nil {
				p.Err = err.Error()
				continue
			}
			p.res.BulkRates = append(p.res.BulkRates, res.BulkRates...)
			p.res.Setup = append(p.res.Setup, res.Setup...)
		}
	}
	out := make([]WallPath, len(paths))
	for i, p := range paths {
		w := p.WallPath
		if w.Err == "" {
			rates := slices.Clone(p.res.BulkRates)
			slices.Sort(rates)
			slices.Sort(p.res.Setup)
			if len(rates) > 0 {
				w.Throughput = rates[len(rates)/2]
			}
			w.SetupP50, w.SetupP99 = percentile(p.res.Setup, 0.50), percentile(p.res.Setup, 0.99)
		}
		out[i] = w
	}
	return out, nil
}

// share is round r's part of n samples split over rounds.
func share(n, rounds, r int) int {
	s := n / rounds
	if r < n%rounds {
		s++
	}
	return s
}

// runClientCmd runs the measuring client as cmd and reads its result.
func runClientCmd(cmd *exec.Cmd, dir string, env []string) (clientResult, error) {
	var res clientResult
	cmd.Env = env
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("%v: %s", err, lastLines(stderr.String(), 3))
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("client printed %q: %v", lastLines(string(out), 2), err)
	}
	return res, nil
}

// wireDirect joins the client host to the upstream host with a veth pair of
// their own, client at .1 and upstream at .2 of a /30 from the lab's top /24,
// and routes the upstream host's address over it from the client. The pair
// lives only inside the two hosts' namespaces and goes with them.
func wireDirect(subnet netip.Prefix, client, upstream *testhosts.Host) error {
	base := subnet.Addr().As4()
	base[2] = 254
	cAddr, uAddr := base, base
	cAddr[3], uAddr[3] = 1, 2
	cIP, uIP := netip.AddrFrom4(cAddr), netip.AddrFrom4(uAddr)

	cns, err := netns.GetFromName(client.NetNS)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", client.NetNS, err)
	}
	defer cns.Close()
	uns, err := netns.GetFromName(upstream.NetNS)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", upstream.NetNS, err)
	}
	defer uns.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "direct0", Namespace: netlink.NsFd(int(cns))},
		PeerName:      "direct0",
		PeerNamespace: netlink.NsFd(int(uns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add the direct veth pair between %s and %s: %w", client.Name, upstream.Name, err)
	}
	for _, side := range []struct {
		ns   netns.NsHandle
		addr netip.Addr
	}{{cns, cIP}, {uns, uIP}} {
		h, err := netlink.NewHandleAt(side.ns)
		if err != nil {
			return fmt.Errorf("netlink in a test host: %w", err)
		}
		err = func() error {
			defer h.Close()
			ln, err := h.LinkByName("direct0")
			if err != nil {
				return err
			}
			if err := h.AddrAdd(ln, &netlink.Addr{IPNet: &net.IPNet{IP: side.addr.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
				return err
			}
			if err := h.LinkSetUp(ln); err != nil {
				return err
			}
			if side.ns != cns {
				return nil
			}
			return h.RouteAdd(&netlink.Route{LinkIndex: ln.Attrs().Index, Src: side.addr.AsSlice(),
				Dst: &net.IPNet{IP: upstream.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}})
		}()
		if err != nil {
			return fmt.Errorf("wire the direct link at %s: %w", side.addr, err)
		}
	}
	return nil
}

// loadAverage is the 1-minute load average, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

func runIn(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func firstLine(cmd *exec.Cmd) string {
	out, err := cmd.CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil && line == "" {
		return "unavailable (" + err.Error() + ")"
	}
	return line
}

// lastLines returns the last n non-empty lines of s, joined by " / ".
func lastLines(s string, n int) string {
	var ls []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " / ")
}
