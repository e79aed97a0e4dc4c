package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/machine"
)

// Walled is one command behind the network wall with the door beside it. A local
// run and the remote agent both run it: only where the streams and the events go
// differs.
type Walled struct {
	Run     string // the run's id, copied into every event
	Machine string
	Lane    machine.Lane

	Command []string
	Dir     string
	Env     []string // proxy variables are dropped

	Policy   *policy.Policy
	Pins     map[string][]netip.Addr
	Resolver string
	// UpstreamRoots is a PEM file of authorities the door trusts, besides
	// the machine's, when it verifies a host the policy inspects.
	UpstreamRoots string
	// Upstream, when set, is the gateway the door sends every connection
	// on to; Policy then gives only the ports.
	Upstream *door.Upstream

	// Stdin, Stdout and Stderr are the run's streams; a terminal on Stdin gets the
	// run its own pseudo-terminal with Stdin's size.
	Stdin, Stdout, Stderr *os.File
	// OwnTerminal says the streams are one pseudo-terminal opened for this run
	// alone (the remote agent's), not the person's: the wall takes it as it is,
	// with no second pseudo-terminal between, and its resizes reach the wall
	// directly.
	OwnTerminal bool
	// Signals are forwarded to the run; SIGWINCH resizes its terminal.
	Signals <-chan os.Signal
	// Emit receives every event of the door. It must not block for long.
	Emit func(event.Event)
	// KillGrace is how long the run has between SIGTERM and SIGKILL once ctx is
	// done; zero means 5s.
	KillGrace time.Duration
	// BeforeStart, if set, is called once the wall is up, before the command
	// starts; an error ends the run there.
	BeforeStart func() error
	// OnStart, if set, is called once the command runs inside the wall.
	OnStart func()
	// OnPid, if set, is told the pid of the wall's process (the root of the
	// run's tree, on this machine), before OnStart.
	OnPid func(pid int)
	// Landlock also confines the command with Landlock, where the kernel has
	// network rules: TCP connect only to the policy's ports and DNS.
	Landlock bool

	// NeverWritable are more of postern's own places the run may not write
	// (the agent's directory); the connect-door carry guards them.
	NeverWritable []string
	// InitDir is where a network wall keeps its init (netwall.Spec.InitDir):
	// a directory of postern's own that the run can neither write nor, on
	// this machine, see.
	InitDir string
	// Files is what the run may do with the host's files (see netwall.Files):
	// the policy's writable, deny_read and allow_read are added to it.
	Files netwall.Files
	// PidsLimit overrides the policy's pids_limit when set.
	PidsLimit int
	// Where names the machine in what the person is told about the run's
	// writes ("" for this one).
	Where string
	// NoNetwork runs the command with no network at all: only lo, no door,
	// no DNS (--network none).
	NoNetwork bool

	// Carrier raises the wall: the one carry.Choose chose (nil: the network
	// wall's).
	Carrier carry.Carrier
	// InContainer says Carrier raises a container: its streams are handed
	// to the engine as they are, its environment starts from the image's.
	InContainer bool
	// Open is a container on its engine's own network (--egress-open): no
	// wall, no door.
	Open bool

	// Settle, when set, is handed the wall's teardown (the init's exit, its
	// namespaces, the run's cgroup, the wall's descriptors) once the command
	// and every process of the run are gone, to run beside what the caller
	// does next, such as writing the final record; the caller must wait for
	// it before it exits. Unset, RunWalled tears the wall down itself.
	Settle func(teardown func())

	Logger *slog.Logger
	Warn   io.Writer // teardown problems meant for the person
	// OnWrites, when set, receives what tellWrites told the person.
	OnWrites func(lines []string)
}

// RunWalled is the one path of every walled run, whatever its carry: it
// raises the wall through w.Carrier, serves the door on the wall's
// listeners (unless the run has no network, or an open one), starts the
// command and waits for it, then tells what became of the run's writes. When
// ctx is done the run gets SIGTERM, then SIGKILL after KillGrace. It returns
// the command's exit status (128+n for signal n). A wall the machine refuses
// is a *carry.Refusal.
func RunWalled(ctx context.Context, w Walled) (int, error) {
	w.fillDefaults()
	c, err := w.equip()
	if err != nil {
		return 0, err
	}
	if c.tty != nil {
		defer c.tty.close()
	}
	wall, err := w.Carrier.Raise(ctx, c.spec)
	if err != nil {
		var perr *netwall.PlaceError
		switch {
		case errors.As(err, &perr):
			// Refused before anything was spawned: a place the run may not
			// have, named by the policy (its position first) or not.
			if perr.Pos != "" {
				return 0, &PolicyError{perr}
			}
			return 0, perr
		case errors.Is(err, seatbelt.ErrCommandNotFound):
			fmt.Fprintf(c.spec.Stderr, "postern: %v\n", err)
			return 127, nil
		}
		return 0, err
	}
	settled := false
	defer func() {
		if !settled {
			wall.Close()
		}
	}()
	if p, ok := wall.(interface{ PidsLimit() string }); ok {
		if lim := p.PidsLimit(); strings.HasPrefix(lim, "none") {
			fmt.Fprintf(w.Warn, "postern: run %s: its processes are not limited: %s\n", w.Run, lim)
		}
	}
	if w.BeforeStart != nil {
		if err := w.BeforeStart(); err != nil {
			return 0, err
		}
	}
	onStart := w.OnStart
	if p, ok := wall.(interface{ Pid() int }); ok && w.OnPid != nil && !w.InContainer {
		onStart = func() {
			w.OnPid(p.Pid())
			if w.OnStart != nil {
				w.OnStart()
			}
		}
	}
	supervise := func() (int, error) {
		code, err := superviseWall(ctx, wall, c.tty, w.Signals, w.KillGrace, onStart)
		if ref := (*carry.Refusal)(nil); errors.As(err, &ref) {
			return code, ref
		}
		if w.InContainer {
			return containerNotRun(wall, w.Command[0], code, err)
		}
		return code, err
	}
	var e walledExit
	ls, listens := wall.(interface{ Listeners() door.Listeners })
	if c.cfg == nil || !listens {
		e.code, e.err = supervise()
	} else {
		e = withDoor(ctx, ls.Listeners(), *c.cfg, supervise)
	}
	if lines := wallWrites(wall, w.Where, w.Logger, w.Run); len(lines) > 0 {
		tellWrites(w.Warn, w.Run, lines)
		if w.OnWrites != nil {
			w.OnWrites(lines)
		}
	}
	if w.Settle != nil {
		// The command's Wait returned: its processes are gone, and the
		// door is stopped.
		settled = true
		w.Settle(func() { _ = wall.Close() })
	}
	if e.err != nil {
		return e.code, e.err
	}
	e.tellTeardown(w.Logger, w.Warn, w.Run)
	return e.code, nil
}

// equipped is a run made ready for its carrier: the spec every carrier
// reads, the door's config (nil: no door), the run's own terminal.
type equipped struct {
	spec carry.WallSpec
	cfg  *door.Config
	tty  *terminal
}

// equip readies w for its carrier: what each carry alone needs (the network
// wall's files and trusted authority, the seatbelt's policy, a container's
// environment) is set on the carrier Choose chose, and only on it, since
// some of it costs work (an authority, a directory made).
func (w *Walled) equip() (*equipped, error) {
	pol := w.Policy
	observe := pol.Mode == policy.Observe
	ports := wallPorts(pol)
	if w.NoNetwork {
		ports = nil
	}
	c := &equipped{spec: carry.WallSpec{
		Run: w.Run, Machine: w.Machine, Lane: w.Lane,
		Command: w.Command, Dir: w.Dir,
		Ports: ports, AllTCP: observe && !w.NoNetwork, NoNetwork: w.NoNetwork, Open: w.Open,
		PidsLimit: w.PidsLimit, Logger: w.Logger,
	}}
	if c.spec.PidsLimit <= 0 {
		c.spec.PidsLimit = pol.PidsLimit
	}
	// The door's config; each carry below says what it adds.
	cfg := door.Config{Policy: pol, Resolver: w.Resolver, AddHosts: w.Pins, Emit: w.Emit, Run: w.Run, Logger: w.Logger}
	if w.InContainer {
		// With a terminal the engine's client gives the container a
		// terminal of its own and keeps its size; the person's terminal is
		// never the run's. The container starts from its image's
		// environment: only what is passed is added, and the guardrails
		// (through the door, or straight to them on an open network).
		c.spec.TTY = isTerminal(w.Stdin)
		c.spec.Stdin, c.spec.Stdout, c.spec.Stderr = w.Stdin, w.Stdout, w.Stderr
		c.spec.Env = w.Env
		if !w.NoNetwork {
			c.spec.Env = append(c.spec.Env[:len(c.spec.Env):len(c.spec.Env)], guardrailEnv(pol, w.Open)...)
		}
		if !w.NoNetwork && !w.Open {
			c.cfg = &cfg
		}
		return c, nil
	}
	stdin, stdout, stderr, tty, ownTTY, err := w.streams()
	if err != nil {
		return nil, err
	}
	c.tty = tty
	c.spec.Stdin, c.spec.Stdout, c.spec.Stderr = stdin, stdout, stderr
	c.spec.TTY = ownTTY || (tty != nil && tty.keys != nil)
	closeTTY := func() {
		if tty != nil {
			tty.close()
		}
	}
	switch k := w.Carrier.(type) {
	case *seatbelt.Carrier:
		c.spec.Env = withGuardrails(w.Env, pol, false)
		k.Policy = pol
		k.NeverWritable = append(neverWritable(), w.NeverWritable...)
		c.cfg = &cfg
	default:
		// The network wall. The run is pointed at its guardrails, which it
		// reaches through the door on their ports.
		env := w.Env
		if !w.NoNetwork {
			env = withGuardrails(env, pol, false)
		}
		if w.Landlock && !observe && !w.NoNetwork {
			env = append(env[:len(env):len(env)], netwall.LandlockConnectEnv(ports))
		}
		c.spec.Env = walledEnv(withoutInjected(env, pol))
		// The run trusts the authority the door shows inspected hosts
		// with; what postern reads injected headers from stays out of its
		// reach.
		ca, err := inspectAuthority(pol)
		if err != nil {
			closeTTY()
			return nil, err
		}
		if nw, ok := k.(*netwall.Carrier); ok {
			if ca != nil {
				nw.TrustPEM = ca.CertPEM()
			}
			nw.Hide = pol.InjectFiles()
			nw.Files = policyFiles(w.Files, pol)
			nw.InitDir = w.InitDir
		}
		if !w.NoNetwork {
			// On a network wall the guardrails' seal is held: their hosts
			// are denied whatever else the policy says.
			cfg.Authority, cfg.UpstreamRoots, cfg.Upstream = ca, w.UpstreamRoots, w.Upstream
			cfg.Seal = len(pol.Guardrails) > 0
			c.cfg = &cfg
		}
	}
	return c, nil
}

// wallWrites says what became of the run's writes that did not reach the
// host as written (the network wall's), or of the guarded places the run
// changed (the connect door's), each logged too.
func wallWrites(wall carry.Wall, where string, logger *slog.Logger, run string) []string {
	switch k := wall.(type) {
	case interface{ Ending() netwall.Ending }:
		lines := writeLines(k.Ending(), where)
		for _, l := range lines {
			logger.Info("run's writes", "run", run, "what", l)
		}
		return lines
	case interface{ GuardChanges() []seatbelt.GuardChange }:
		changes := k.GuardChanges()
		guarded := make([]string, len(changes))
		for i, c := range changes {
			logger.Info("guarded path changed by the run", "run", run, "path", c.Path, "what", c.What)
			guarded[i] = c.String()
		}
		return guarded
	}
	return nil
}

// fillDefaults fills what w leaves unset: no logs, no warnings, no events
// kept, the default kill grace, a policy that allows nothing.
func (w *Walled) fillDefaults() {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Warn == nil {
		w.Warn = io.Discard
	}
	if w.Emit == nil {
		w.Emit = func(event.Event) {}
	}
	if w.KillGrace <= 0 {
		w.KillGrace = killGrace
	}
	if w.Policy == nil {
		w.Policy = policy.Nothing()
	}
	if w.Carrier == nil {
		w.Carrier = &netwall.Carrier{}
	}
}

// streams are the run's streams (see runTerminal), unless w's streams are
// the run's own terminal already (ownTTY).
func (w *Walled) streams() (stdin, stdout, stderr *os.File, tty *terminal, ownTTY bool, err error) {
	stdin, stdout, stderr = w.Stdin, w.Stdout, w.Stderr
	ownTTY = w.OwnTerminal && isTerminal(stdin)
	if !ownTTY {
		if stdin, stdout, stderr, tty, err = runTerminal(w.Stdin, w.Stdout, w.Stderr); err != nil {
			return nil, nil, nil, nil, false, err
		}
	}
	return stdin, stdout, stderr, tty, ownTTY, nil
}

// policyFiles adds the policy's writable, deny_read and allow_read to f.
func policyFiles(f netwall.Files, p *policy.Policy) netwall.Files {
	places := func(rs []policy.PathRule) []netwall.Place {
		out := make([]netwall.Place, len(rs))
		for i, r := range rs {
			out[i] = netwall.Place{Path: r.Text, Pos: r.Pos}
		}
		return out
	}
	f.Writable = append(slices.Clone(f.Writable), places(p.Writable)...)
	f.DenyRead = append(slices.Clone(f.DenyRead), places(p.DenyRead)...)
	f.AllowRead = append(slices.Clone(f.AllowRead), places(p.AllowRead)...)
	return f
}

// writeLines says, one sentence each, what became of a run's writes that did
// not reach the host as written; where names the machine ("" for this one).
func writeLines(e netwall.Ending, where string) []string {
	var out []string
	for _, d := range e.Discarded {
		out = append(out, "discarded "+d.String())
	}
	on := ""
	if where != "" {
		on = " on machine " + where
	}
	if e.HomeWrites > 0 {
		some := strings.Join(e.HomeSample, ", ")
		if e.HomeWrites > len(e.HomeSample) {
			some += ", ..."
		}
		what := fmt.Sprintf("%d file(s) it wrote in the home outside its writable places (%s)", e.HomeWrites, some)
		if e.Kept != "" {
			out = append(out, fmt.Sprintf("%s were kept in %s%s", what, e.Kept, on))
		} else {
			out = append(out, what+" were discarded; --keep-home keeps them, writable in the policy lets them through")
		}
	} else if e.Kept != "" {
		out = append(out, fmt.Sprintf("its home's private layer is kept in %s%s", e.Kept, on))
	}
	for _, p := range e.Problems {
		out = append(out, "could not bring a write home: "+p)
	}
	return out
}

// tellWrites tells the person, once the run is over, what became of its
// writes that did not reach the host as written.
func tellWrites(w io.Writer, run string, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "postern: run %s: %s\n", run, l)
	}
}

// walledExit is how a walled command ended: its exit status, or why it
// could not run (err), and apart from that what went wrong stopping its
// door, which is the person's to know and not the run's result.
type walledExit struct {
	code     int
	err      error
	teardown error
}

// tellTeardown logs a teardown problem and tells the person.
func (e walledExit) tellTeardown(logger *slog.Logger, warn io.Writer, run string) {
	if e.teardown == nil {
		return
	}
	logger.Warn("run teardown", "run", run, "err", e.teardown)
	fmt.Fprintf(warn, "postern: run %s: %v\n", run, e.teardown)
}

// withDoor serves a door on a wall's listeners while body runs the walled
// command, then stops the door, giving open connections a bounded drain. The
// door floors the run's own addresses.
func withDoor(ctx context.Context, ls door.Listeners, cfg door.Config, body func() (int, error)) walledExit {
	cfg.Policy = cfg.Policy.WithSelf(netwall.RunAddrs()...)
	d, err := door.New(cfg)
	if err != nil {
		return walledExit{err: fmt.Errorf("start the door: %w", err)}
	}
	// The door outlives a cancelled ctx long enough to drain; it is stopped below.
	doorCtx, stopDoor := context.WithCancel(context.WithoutCancel(ctx))
	doorDone := make(chan error, 1)
	go func() { doorDone <- d.Run(doorCtx, ls) }()

	var e walledExit
	e.code, e.err = body()

	stopDoor()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	select {
	case e.teardown = <-doorDone:
	case <-tctx.Done():
		e.teardown = fmt.Errorf("the door did not stop within %s", teardownTimeout)
	}
	return e
}

// runTerminal decides the run's streams. Every stream that is one of the person's
// terminals is replaced by the run's own pseudo-terminal, never handed in: through
// a terminal passed as stdout the run could change the person's terminal (stty
// -echo) or, where the descriptor is readable, read the keys they type. A stream
// that is a file or a pipe stays one, so 'postern run -- make > log' keeps stderr
// on the screen. The run's terminal copies output to the person's; with stdin a
// terminal it also takes keys and is the run's controlling terminal.
func runTerminal(stdin, stdout, stderr *os.File) (in, out, errOut *os.File, tty *terminal, err error) {
	in, out, errOut = stdin, stdout, stderr
	inTTY, outTTY, errTTY := isTerminal(stdin), isTerminal(stdout), isTerminal(stderr)
	if !inTTY && !outTTY && !errTTY {
		return in, out, errOut, nil, nil
	}
	var keys *os.File
	if inTTY {
		keys = stdin
	}
	screen := stdin
	switch {
	case outTTY:
		screen = stdout
	case errTTY:
		screen = stderr
	}
	tty, err = openTerminal(keys, screen)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if inTTY {
		in = tty.slave
	}
	if outTTY {
		out = tty.slave
	}
	if errTTY {
		errOut = tty.slave
	}
	return in, out, errOut, tty, nil
}

// superviseWall starts the walled command and waits for it, forwarding signals. When
// ctx is done the run gets SIGTERM, then SIGKILL after grace.
func superviseWall(ctx context.Context, wall carry.Wall, tty *terminal, signals <-chan os.Signal, grace time.Duration, onStart func()) (int, error) {
	if err := wall.Start(ctx); err != nil {
		return 0, fmt.Errorf("start the run inside the wall: %w", err)
	}
	if tty != nil {
		if err := tty.start(); err != nil {
			_ = wall.Signal(syscall.SIGKILL)
		}
	}
	if onStart != nil {
		onStart()
	}
	type exit struct {
		code int
		err  error
	}
	waited := make(chan exit, 1)
	go func() {
		code, err := wall.Wait()
		waited <- exit{code, err}
	}()
	var killTimer <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case e := <-waited:
			if tty != nil {
				tty.wait()
			}
			return e.code, e.err
		case sig := <-signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			if s == syscall.SIGWINCH {
				if tty != nil {
					tty.resize()
				}
				continue
			}
			_ = wall.Signal(s)
		case <-done:
			done = nil
			_ = wall.Signal(syscall.SIGTERM)
			killTimer = time.After(grace)
		case <-killTimer:
			_ = wall.Signal(syscall.SIGKILL)
			_ = wall.Close()
		}
	}
}
