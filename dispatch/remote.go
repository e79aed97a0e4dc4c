package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/dispatch/workspace"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
	"github.com/postern-dev/postern/remote-agent/agent"
	"github.com/postern-dev/postern/remote-agent/transport/ssh"
)

// ErrRunLost means the controller lost the remote agent mid-run: the run's state
// is "lost". The agent kills such a run and tears its wall down by itself.
var ErrRunLost = errors.New("run lost")

// Remote says how to reach remote machines.
type Remote struct {
	// SSH are the ssh options (home for ~/.ssh, trust on first use).
	SSH sshclient.Options
	// Progress, if set, is where agent uploads report their progress (a terminal).
	Progress io.Writer
	// Version is postern's, told to the agent in the handshake; "" is "dev".
	Version string
	// Agents, if set, keeps what was measured over sftp of each agent
	// installed on a machine, to check the file against before each use.
	Agents *records.Store
	// Warn is told when an agent's file was not what was installed.
	Warn io.Writer
	// Dir is the run's directory on the machine ("" : one of its own); the
	// workspace shipped sets it.
	Dir string

	ship *workspace.Source // the work to ship before the run (workspace.go)
}

// connectAgent connects to m over ssh and starts its agent for goos/goarch,
// installing it first if it is missing or damaged.
func connectAgent(ctx context.Context, m machine.Machine, goos, goarch string, r Remote) (*sshclient.Client, *agent.Client, agent.Process, error) {
	bin, err := agent.Locate(goos, goarch)
	if err != nil {
		return nil, nil, nil, err
	}
	hash, err := agent.CachedFileHash(bin)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := r.SSH
	if opts.Identity == "" {
		opts.Identity = m.Identity
	}
	sc, err := sshclient.Dial(ctx, m.SSH, opts)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}
	version := r.Version
	if version == "" {
		version = "dev"
	}
	in := agent.Install{Binary: bin, Hash: hash, Dir: m.AgentDir, Version: version}
	if r.Progress != nil {
		in.Progress = uploadProgress(r.Progress, m.Name)
	}
	warn := r.Warn
	if warn == nil {
		warn = io.Discard
	}
	if r.Agents != nil {
		known, err := r.Agents.Agent(m.Name, hash)
		switch {
		case err == nil:
			in.Known = known
		case !errors.Is(err, records.ErrNotFound):
			sc.Close()
			return nil, nil, nil, err
		}
		in.Record = func(st agent.FileState) {
			if err := r.Agents.PutAgent(m.Name, st); err != nil {
				fmt.Fprintf(warn, "postern: agent on %s: what was measured of its file is not recorded (it will be read back next time): %v\n", m.Name, err)
			}
		}
	}
	in.Removed = func(g agent.Installed) {
		if r.Agents != nil {
			if err := r.Agents.RemoveAgent(m.Name, g.Hash); err != nil {
				fmt.Fprintf(warn, "postern: agent on %s: %v\n", m.Name, err)
			}
		}
	}
	// The path and what differed come from the remote: shown as printable text.
	in.Warn = func(what string) {
		fmt.Fprintf(warn, "postern: agent on %s: %s; reinstalled\n", m.Name, termtext.Printable(what))
	}
	t := ssh.NewTransport(sc)
	c, p, err := agent.Dial(ctx, t, in)
	t.Close() // the sftp session; the agent's own session goes on
	if err != nil {
		sc.Close()
		return nil, nil, nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}
	return sc, c, p, nil
}

// agentExitWait bounds how long a finished request waits for the agent to end.
const agentExitWait = 2 * time.Second

// awaitAgent ends the agent's input and waits, briefly, for it to exit once it
// has answered: when postern returns, nothing of the request is left running on
// the remote (and its executable can be replaced at once).
func awaitAgent(p agent.Process) {
	_ = p.Stdin().Close()
	done := make(chan struct{})
	go func() { _ = p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(agentExitWait):
	}
}

// uploadProgress prints an upload's progress on one terminal line.
func uploadProgress(w io.Writer, name string) func(done, total int64) {
	last := time.Time{}
	return func(done, total int64) {
		if done < total && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		pct := int64(100)
		if total > 0 {
			pct = done * 100 / total
		}
		fmt.Fprintf(w, "\rpostern: installing the agent on %s: %3d%% (%.1f of %.1f MB)", name, pct, float64(done)/1e6, float64(total)/1e6)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

// ProbeRemote measures a machine reached over ssh: it asks the remote its OS and
// architecture, starts (installing if needed) the agent built for them, and has
// it run the probe there. The record is returned, not stored.
func ProbeRemote(ctx context.Context, m machine.Machine, r Remote) (*probe.Record, error) {
	if m.IsLocal() {
		return nil, fmt.Errorf("machine %s is local: probe it with probe.Run", m.Name)
	}
	goos, goarch, err := remotePlatform(ctx, m, r)
	if err != nil {
		return nil, err
	}
	sc, c, p, err := connectAgent(ctx, m, goos, goarch, r)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	defer p.Close()
	rec, err := c.Probe(ctx, m.Name)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}
	awaitAgent(p)
	rec.Name = m.Name
	return rec, nil
}

// remotePlatform asks a machine its OS and architecture.
func remotePlatform(ctx context.Context, m machine.Machine, r Remote) (goos, goarch string, err error) {
	opts := r.SSH
	if opts.Identity == "" {
		opts.Identity = m.Identity
	}
	sc, err := sshclient.Dial(ctx, m.SSH, opts)
	if err != nil {
		return "", "", fmt.Errorf("machine %s: %w", m.Name, err)
	}
	out, err := ssh.NewTransport(sc).Output(ctx, "uname -s -m")
	sc.Close()
	if err != nil {
		return "", "", fmt.Errorf("machine %s: ask its OS and architecture: %w", m.Name, err)
	}
	if goos, goarch, err = platform(string(out)); err != nil {
		return "", "", fmt.Errorf("machine %s: %w", m.Name, err)
	}
	return goos, goarch, nil
}

// platform maps 'uname -s -m' to GOOS and GOARCH.
func platform(uname string) (goos, goarch string, err error) {
	f := strings.Fields(uname)
	if len(f) != 2 {
		return "", "", fmt.Errorf("unexpected answer to 'uname -s -m': %q", uname)
	}
	switch strings.ToLower(f[0]) {
	case "linux":
		goos = "linux"
	case "darwin":
		goos = "darwin"
	default:
		return "", "", fmt.Errorf("operating system %q has no postern agent (linux and darwin do)", f[0])
	}
	switch f[1] {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64":
		goarch = "arm64"
	default:
		return "", "", fmt.Errorf("architecture %q has no postern agent (x86_64 and aarch64 do)", f[1])
	}
	return goos, goarch, nil
}

// runRemote runs the command on a remote machine through its agent, which raises
// the wall and the door there. Events are recorded here as they arrive.
func runRemote(ctx context.Context, store *records.Store, run *records.Run, spec Spec, rec *probe.Record, m machine.Machine) (int, error) {
	src := spec.policySrc
	if src == nil && spec.PolicyPath != "" {
		b, err := os.ReadFile(spec.PolicyPath)
		if err != nil {
			return 0, &PolicyError{fmt.Errorf("read policy: %w", err)}
		}
		src = b
	}
	r := spec.Remote
	if r.Progress == nil && isTerminal(spec.Stderr) {
		r.Progress = spec.Stderr
	}
	// A run with a wall needs a record, which names the platform; an open
	// run may go to a machine never measured, which is asked.
	var goos, goarch string
	if rec != nil && rec.OS != "" {
		goos, goarch = rec.OS, rec.Arch
	} else {
		var err error
		if goos, goarch, err = remotePlatform(ctx, m, r); err != nil {
			return 0, err
		}
	}
	sc, c, p, err := connectAgent(ctx, m, goos, goarch, r)
	if err != nil {
		return 0, err
	}
	defer sc.Close()
	defer p.Close()
	if spec.Remote.ship != nil {
		return runRemoteWorkspace(ctx, store, run, spec, rec, m, src, c, p, sc, goos, goarch)
	}
	return runOnAgent(ctx, store, run, spec, rec, m, src, c, p)
}

// runOnAgent carries a run through an agent that has answered the handshake.
// The agent's word on the kernel it runs on is checked against the record
// first: a record measured on another kernel no longer says what this one can
// wall, and the run is refused before its command is sent.
func runOnAgent(ctx context.Context, store *records.Store, run *records.Run, spec Spec, rec *probe.Record, m machine.Machine, src []byte, c *agent.Client, p agent.Process) (int, error) {
	if _, err := carry.Choose(rec, carry.Spec{Machine: m.Name, Lane: run.Lane, Kernel: c.Hello.Kernel, EgressOpen: run.EgressOpenReason}); err != nil {
		var ref *carry.Refusal
		if errors.As(err, &ref) && ref.Kernel != "" {
			ref.Fix = fmt.Sprintf("machine %s now runs kernel %s: %s", m.Name, c.Hello.Kernel, ref.Fix)
		}
		return 0, err
	}
	req := agent.RunRequest{
		ID: run.ID, Machine: m.Name, Lane: string(run.Lane), Command: spec.Command,
		Env: withEnv(remoteEnv(spec.Env), spec.PassEnv), Policy: src, PolicyAt: spec.PolicyPath,
		AddHosts: spec.AddHosts, Resolver: spec.Resolver, Open: run.EgressOpenReason,
		KeepHome: spec.KeepHome, PidsLimit: spec.PidsLimit, NoNetwork: spec.Network == NetworkNone,
		Dir: spec.Remote.Dir,
	}
	cio := agent.ClientIO{Stdout: spec.Stdout, Stderr: spec.Stderr, Signals: spec.Signals}
	if spec.Stdin != nil {
		cio.Stdin = spec.Stdin
	}
	var tty *localTerminal
	// A terminal for the run when the person is at one (keys in, output out),
	// as ssh would; with output to a file or pipe, plain streams keep stdout and
	// stderr apart and free of terminal line endings.
	if isTerminal(spec.Stdin) && isTerminal(spec.Stdout) {
		tty = &localTerminal{f: spec.Stdin}
		req.TTY = true
		req.Rows, req.Cols, _ = tty.size()
		cio.Winsize = tty.size
	}
	evlog := newEventLog(store, run, spec)
	cio.OnEvent = evlog.Emit
	cio.OnStart = func(st agent.Started) {
		run.Landlock = termtext.Printable(st.Landlock)
		// Where the run is on the remote, as its agent says.
		if st.Pid > 0 {
			run.RunPid = st.Pid
		}
		if st.Dir != "" {
			run.Dir = termtext.Printable(st.Dir)
		}
		if st.Seal != nil {
			// Measured beside the run, on the remote.
			run.Seal = &records.Seal{Held: st.Seal.Held, Guardrail: termtext.Printable(st.Seal.Guardrail), Why: termtext.Printable(st.Seal.Why)}
			warnSeal(spec.Warn, run.ID, run.Seal)
		}
		if tty != nil {
			tty.raw()
		}
		if err := store.PutRun(run); err != nil {
			spec.Logger.Warn("record the run's start", "run", run.ID, "err", err)
		}
		if started := startedHook(spec, run); started != nil {
			started()
		}
	}
	exit, runErr := c.Run(ctx, req, cio)
	if tty != nil {
		tty.restore()
	}
	if runErr == nil {
		awaitAgent(p)
	}
	logErr := closeEventLog(ctx, evlog, run)
	if runErr != nil {
		if errors.Is(runErr, agent.ErrLost) {
			return 0, fmt.Errorf("%w: %s on machine %q: the connection to its agent dropped (%v); the agent there kills the run and tears its wall down by itself within 5s; the record: 'postern runs show %s'", ErrRunLost, run.ID, m.Name, runErr, run.ID)
		}
		return 0, runErr
	}
	if logErr != nil {
		fmt.Fprintf(spec.Warn, "postern: run %s: %v\n", run.ID, logErr)
	}
	if len(exit.Writes) > 0 {
		// Sentences from the remote machine: shown only as printable text.
		run.Writes = make([]string, len(exit.Writes))
		for i, g := range exit.Writes {
			run.Writes[i] = termtext.Printable(g)
		}
		tellWrites(spec.Warn, run.ID, run.Writes)
	}
	switch {
	case exit.Refused:
		return 0, &carry.Refusal{Lane: run.Lane, Machine: m.Name, MeasuredAt: measuredAt(rec),
			AtRunTime: termtext.Printable(exit.Error), Fix: termtext.Printable(exit.Fix)}
	case exit.NotRun != "":
		return exit.Code, &CommandError{Command: spec.Command[0], NotFound: exit.NotRun == agent.NotFound,
			Detail: fmt.Sprintf("%s, on machine %s", termtext.Printable(exit.Error), m.Name)}
	case exit.Error != "":
		return exit.Code, fmt.Errorf("machine %s: %s", m.Name, termtext.Printable(exit.Error))
	}
	return exit.Code, nil
}

// remoteEnv is what of the person's environment goes to a remote run: the
// terminal and language, nothing else (the remote has its own HOME, PATH, …).
func remoteEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "TERM", k == "COLORTERM", k == "LANG", strings.HasPrefix(k, "LC_"):
			out = append(out, kv)
		}
	}
	return out
}

// localTerminal is the person's terminal during a remote run: raw while the run
// owns it, its size sent on start and on SIGWINCH.
type localTerminal struct {
	f     *os.File
	state *term.State
}

func (t *localTerminal) size() (rows, cols uint16, ok bool) {
	w, h, err := term.GetSize(int(t.f.Fd()))
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return 0, 0, false
	}
	return uint16(h), uint16(w), true
}

func (t *localTerminal) raw() {
	if st, err := term.MakeRaw(int(t.f.Fd())); err == nil {
		t.state = st
	}
}

func (t *localTerminal) restore() {
	if t.state != nil {
		_ = term.Restore(int(t.f.Fd()), t.state)
	}
}

// ServeAgentRun is the agent's side of a remote run: it compiles the policy the
// controller sent and runs the command behind the wall with the door beside it,
// exactly as a local run does, with the given streams and event sink.
func ServeAgentRun(ctx context.Context, req agent.RunRequest, rio agent.RunIO, logger *slog.Logger) (int, error) {
	begun := time.Now()
	if strings.TrimSpace(req.Open) != "" {
		return serveOpenRun(ctx, req, rio)
	}
	pol := policy.Nothing()
	if len(req.Policy) > 0 {
		name := req.PolicyAt
		if name == "" {
			name = "policy.hcl"
		}
		p, err := policy.Parse(name, req.Policy)
		if err != nil {
			return 0, fmt.Errorf("policy: %w", err)
		}
		pol = p
	}
	pins, err := parsePins(req.AddHosts)
	if err != nil {
		return 0, err
	}
	files, err := agentFiles(req)
	if err != nil {
		return 0, err
	}
	dir := req.Dir
	if dir == "" {
		// Not the home, which a run never writes for real: a directory of
		// the run's own, removed at its end if it is left empty.
		home, err := os.UserHomeDir()
		if err != nil {
			return 0, fmt.Errorf("the run's directory: %w", err)
		}
		dir = filepath.Join(dataHome(home), "postern", "runs", req.ID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return 0, fmt.Errorf("make the run's directory: %w", err)
		}
		defer os.Remove(dir)
	}
	env := withEnv(os.Environ(), req.Env)
	if ce := checkCommand(req.Command, dir, env, pathPassed(req.Env)); ce != nil {
		return 0, notRun(ce)
	}
	var notHere string
	switch {
	case req.NoNetwork:
		notHere = sealNotNetwork
	case runtime.GOOS == "darwin":
		notHere = sealNotMacOS
	}
	seal := sealState(sealOf(ctx, pol, notHere))
	var carrier carry.Carrier = &netwall.Carrier{}
	onStart := func() {
		switch {
		case req.NoNetwork:
			rio.OnStart("none: the run has no network", seal)
		case pol.Mode == policy.Observe:
			rio.OnStart("none in observe mode: tcp to every port goes to the door", seal)
		default:
			rio.OnStart(netwall.LandlockStatus(wallPorts(pol)), seal)
		}
	}
	if runtime.GOOS == "darwin" {
		// A Mac carries the run with the connect door (remote-macos).
		carrier, onStart = &seatbelt.Carrier{}, func() {
			if rio.Place != nil {
				rio.Place(0, dir)
			}
			rio.OnStart("none: macOS, the run is under a seatbelt profile", seal)
		}
	}
	code, err := RunWalled(ctx, Walled{
		Carrier: carrier,
		Run:     req.ID, Machine: req.Machine, Lane: machine.Lane(req.Lane),
		Command: req.Command, Dir: dir, Env: env,
		Policy: pol, Pins: pins, Resolver: req.Resolver,
		Stdin: rio.Stdin, Stdout: rio.Stdout, Stderr: rio.Stderr, OwnTerminal: true,
		Files: files, PidsLimit: req.PidsLimit, Where: req.Machine,
		OnWrites: rio.Writes, // told to the person at home, with the exit
		Signals:  rio.Signals, Emit: rio.Emit, KillGrace: rio.KillGrace,
		OnStart: onStart,
		OnPid: func(pid int) {
			if rio.Place != nil {
				rio.Place(pid, dir)
			}
		},
		Landlock:      true,
		NoNetwork:     req.NoNetwork,
		NeverWritable: agentDir(),
		InitDir:       agentInitDir(),
		Logger:        logger,
	})
	if time.Since(begun) >= primeAfter {
		primeAtExit(agentInitDir(), logger)
	}
	var ref *carry.Refusal
	if errors.As(err, &ref) {
		return 0, ref // the agent sends it home as a refusal
	}
	return code, err
}

// agentFiles are what a remote run may never write: the agents' directory
// (which holds this agent) and a POSTERN_HOME of the remote's own are
// masked. With KeepHome, the home's private layer is kept on the remote, in
// ~/.local/state/postern/kept/RUN.
func agentFiles(req agent.RunRequest) (netwall.Files, error) {
	f := netwall.Files{Guard: workspaceGuard()}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		// Installed as DIR/HASH/postern: DIR holds every version.
		f.Protect = append(f.Protect, filepath.Dir(filepath.Dir(exe)))
	}
	if p, err := records.DefaultPath(); err == nil {
		f.Protect = append(f.Protect, filepath.Dir(p))
	}
	if req.KeepHome {
		home, err := os.UserHomeDir()
		if err != nil {
			return f, fmt.Errorf("keep the run's home: %w", err)
		}
		f.KeepHome = filepath.Join(stateHome(home), "postern", "kept", req.ID)
		if err := os.MkdirAll(f.KeepHome, 0o700); err != nil {
			return f, fmt.Errorf("make the directory to keep the run's home in: %w", err)
		}
	}
	return f, nil
}

// dataHome and stateHome are the XDG base directories under home.
func dataHome(home string) string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return d
	}
	return filepath.Join(home, ".local", "share")
}

func stateHome(home string) string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return d
	}
	return filepath.Join(home, ".local", "state")
}

// serveOpenRun is the agent's side of a run with no wall (--egress-open): the
// command runs as the remote user would run it, in a session of its own that
// ends with it, or is ended when the controller goes.
func serveOpenRun(ctx context.Context, req agent.RunRequest, rio agent.RunIO) (int, error) {
	dir := req.Dir
	if dir == "" {
		dir, _ = os.UserHomeDir()
	}
	env := withEnv(os.Environ(), req.Env)
	if ce := checkCommand(req.Command, dir, env, pathPassed(req.Env)); ce != nil {
		return 0, notRun(ce)
	}
	if rio.Place != nil {
		rio.Place(0, dir)
	}
	rio.OnStart("none: open network (--egress-open)", nil)
	return runOpenCmd(ctx, openRun{
		Command: req.Command, Dir: dir, Env: env,
		Stdin: rio.Stdin, Stdout: rio.Stdout, Stderr: rio.Stderr,
		Signals: rio.Signals, KillGrace: rio.KillGrace,
		OwnSession: true, TTY: req.TTY,
	})
}

// notRun is a command the agent could not start, as it tells the controller.
func notRun(ce *CommandError) error {
	why := agent.NotExecutable
	if ce.NotFound {
		why = agent.NotFound
	}
	return &agent.NotRunError{Why: why, Detail: ce.Detail}
}

// ProbeHere is the agent's side of a remote probe.
func ProbeHere(ctx context.Context, name, version string, logger *slog.Logger) (*probe.Record, error) {
	rec, err := probe.Run(ctx, probe.Options{Name: name, Version: version, Logger: logger})
	if err == nil {
		primeAtExit(agentInitDir(), logger)
	}
	return rec, err
}

// sealState is a seal as the agent sends it home.
func sealState(s *records.Seal) *agent.SealState {
	if s == nil {
		return nil
	}
	return &agent.SealState{Held: s.Held, Guardrail: s.Guardrail, Why: s.Why}
}
