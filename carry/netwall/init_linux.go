package netwall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/internal/pid1"
)

// Exit statuses of the init when it cannot report through the control socket.
const (
	exitInitFailed = 125
	exitKilled     = pid1.KilledStatus
)

// Init is the wall's init, pid 1 of the run's namespaces; the process Raise
// starts with InitArg calls it and exits with the status it returns. It sets up
// the namespace as args (netArgs) and the control socket ask, starts the
// command with every privilege dropped (see startCommand), reaps every
// process that ends in the pid namespace and returns the command's status
// (128+n for signal n).
// Signals arriving on signals and
// from Wall.Signal go to the command's process group. When ctx is done or the
// host side disappears, the run is killed.
//
// held, if not nil, is closed once signals receives what it is to: the
// command does not start before. The signals are asked for while the wall
// goes up, where they cost the start nothing (see signals.Hold).
//
// Init assumes it owns the process: it must only be called from that entry point.
func Init(ctx context.Context, args []string, signals <-chan os.Signal, held <-chan struct{}) int {
	plan, err := parseNetArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "postern: network wall init: %v (it only runs under 'postern run')\n", err)
		return exitInitFailed
	}
	ctl, err := newChannel(os.NewFile(controlFD, "wall-control"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "postern: network wall init: %v (it only runs under 'postern run')\n", err)
		return exitInitFailed
	}
	defer ctl.Close()

	// The network is made while the rest of the configuration arrives and
	// is decoded: it needs nothing of it.
	network := startNetwork(plan)
	m, _, err := ctl.recv()
	if err != nil || m.Type != msgConfig || m.Config == nil {
		return exitInitFailed
	}
	cfg := *m.Config
	cfg.netPlan = plan

	// The run and the init share its pids limit: once the run has filled
	// it, a thread the Go runtime then made for the init would fail, and
	// take the init, so the whole run, with it. The init makes its spare
	// threads while it sets the wall up, once its mounts are made: the
	// runtime makes them one at a time, and made at once they would hold
	// back the network's setup beside the mounts.
	spare := make(chan struct{})
	afterMounts := func() {
		go func() {
			defer close(spare)
			reserveThreads(spareThreads)
		}()
	}
	ready := message{Type: msgReady}
	if cfg.PidMax > 0 {
		// Before the command or anything of the run starts: the limit
		// holds the run from its first fork.
		if err := setPidMax(cfg.PidMax); err != nil {
			ready.PidMaxErr = err.Error()
		}
	}
	files, view, werr := setup(cfg, network, afterMounts)
	if werr != nil {
		_ = ctl.send(message{Type: msgError, Err: werr})
		return exitInitFailed
	}
	defer view.close()
	err = ctl.send(ready, files...)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return exitInitFailed
	}

	// The thread that starts the command gives up its privileges while the
	// host answers.
	starter := prepareDropped(cfg.Command[0], cfg.Env)
	if m, _, err = ctl.recv(); err != nil || m.Type != msgStart {
		return exitInitFailed
	}
	var tty *runTerminal
	if cfg.TTY {
		if tty, err = openRunTerminal(); err != nil {
			_ = ctl.send(message{Type: msgError, Err: &wireError{Step: "start", Message: err.Error()}})
			return exitInitFailed
		}
		defer tty.restore()
	}
	if werr := limitProcs(cfg.NProc); werr != nil {
		_ = ctl.send(message{Type: msgError, Err: werr})
		return exitInitFailed
	}
	// The run's processes share the init's uid: whatever of the init /proc
	// gates behind ptrace (its descriptors, memory, environment) is theirs to
	// read wherever the init's credentials are no more than theirs, as they
	// are on the thread that starts the command (see dropped). Not
	// dumpable, the init is out of their reach whatever its threads hold.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		_ = ctl.send(message{Type: msgError, Err: &wireError{Step: "start", Message: fmt.Sprintf("make the init not dumpable: %v", err)}})
		return exitInitFailed
	}
	<-spare
	if held != nil {
		<-held
	}
	pid, notify, err := startCommand(cfg, tty, starter)
	if err != nil {
		_ = ctl.send(message{Type: msgError, Err: &wireError{Step: "start", Message: err.Error()}})
		return exitInitFailed
	}
	if tty != nil {
		tty.relay()
	}
	var started []*os.File
	if notify != nil {
		started = append(started, notify)
	}
	err = ctl.send(message{Type: msgStarted, Pid: pid}, started...)
	if notify != nil {
		notify.Close()
	}
	if err != nil {
		pid1.KillAll(pid)
		return exitKilled
	}
	status := supervise(ctx, ctl, pid, signals, tty)
	// Nothing of the run may change its layer while it is brought home.
	pid1.KillAll(pid)
	reaped := reapAll()
	ending := view.finish()
	end := message{Type: msgEnded, Ending: &ending}
	if reaped {
		// The host may take the run as over from here, while the init
		// exits and its namespaces are torn down.
		end.Status = &status
	}
	_ = ctl.send(end)
	return status
}

// reapAll waits for every other process of the pid namespace, killed, as its
// pid 1, until none is left; it says whether it is so (false when the init
// is not pid 1, or some process outlasts it: then only the init's own exit,
// which the kernel holds until the namespace is empty, says so).
func reapAll() bool {
	if os.Getpid() != 1 {
		return false
	}
	// Bounded: a process that joined the namespace from outside is not
	// the init's to reap.
	for range 16 {
		for {
			// Beside pid1.Reap's own wait: whichever reaps, ECHILD says
			// no child is left.
			_, err := unix.Wait4(-1, nil, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				break
			}
		}
		// A process forked while the kill went round is a child of the
		// init too, once its parent is gone; none may be left.
		if err := unix.Kill(-1, unix.SIGKILL); err == unix.ESRCH {
			return true
		}
	}
	return false
}

// limitProcs sets RLIMIT_NPROC to n, when n is not 0: the command and all
// it starts count against it in the run's own user namespace (Linux 5.14
// and later); the init is one of them.
func limitProcs(n uint64) *wireError {
	if n == 0 {
		return nil
	}
	lim := unix.Rlimit{Cur: n, Max: n}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return &wireError{Step: "start", Message: fmt.Sprintf("limit the run to %d processes: %v", n, err)}
	}
	return nil
}

// supervise runs the command as pid 1 until it ends, forwarding the signals
// the process receives and those the host asks for to its group; SIGWINCH
// resizes the run's terminal, tty, if it has one.
func supervise(ctx context.Context, ctl *channel, pid int, signals <-chan os.Signal, tty *runTerminal) int {
	c := pid1.Command{
		Pid:      pid,
		Signals:  signals,
		Requests: signalRequests(ctl),
		Local: func(sig syscall.Signal) bool {
			if sig != syscall.SIGWINCH {
				return false
			}
			if tty != nil {
				tty.resize()
			}
			return true
		},
	}
	if tty != nil {
		c.Ended = func() {
			// What the command left behind would hold its terminal open.
			pid1.KillAll(pid)
			tty.drain()
		}
	}
	return pid1.Supervise(ctx, c)
}

// signalRequests reads the host's messages and passes on the signals it asks
// for; the channel closes when the host side does. The reader ends with the
// process: Init's return is its exit.
func signalRequests(ctl *channel) <-chan syscall.Signal {
	reqs := make(chan syscall.Signal)
	go func() {
		defer close(reqs)
		for {
			m, files, err := ctl.recv()
			for _, f := range files {
				f.Close()
			}
			if err != nil {
				return
			}
			if m.Type == msgSignal {
				reqs <- syscall.Signal(m.Signal)
			}
		}
	}()
	return reqs
}

// network is what startNetwork made of the run's network namespace.
type network struct {
	files []*os.File
	werr  *wireError
}

// makeNetwork makes the calling thread's network namespace the wall as plan
// says: only lo, or lo, the routes, the door's listeners and the rules.
func makeNetwork(plan netPlan) network {
	var n network
	if plan.NoNetwork {
		n.werr = loopbackOnly()
	} else {
		n.files, n.werr = configureNetns(plan.Ports, plan.AllTCP)
	}
	return n
}

// startNetwork makes the calling process's network namespace the wall as
// plan says, on a goroutine of its own; the channel gives what it made.
func startNetwork(plan netPlan) <-chan network {
	done := make(chan network, 1)
	go func() { done <- makeNetwork(plan) }()
	// A goroutine just made waits in this one's turn, which only ends when
	// it blocks; yielding hands it to the other processor now.
	runtime.Gosched()
	return done
}

// setup makes the mount namespace the run's and takes what startNetwork
// made (netDone) beside it: lo, routes, listeners, rules. It returns the
// listeners' descriptors (transparent, DNS UDP, DNS TCP) and what it keeps
// of the run's view for its end. Neither step reads what the other changes.
//
// afterMounts is called once the mounts are made, while the network may
// still be set up.
func setup(cfg initConfig, netDone <-chan network, afterMounts func()) ([]*os.File, *mounted, *wireError) {
	view, err := privateMounts(cfg, mountProc)
	afterMounts()
	n := <-netDone
	if n.werr != nil {
		if err == nil {
			view.close()
		}
		return nil, nil, n.werr
	}
	if err != nil {
		for _, f := range n.files {
			f.Close()
		}
		var oe *overlayError
		if errors.As(err, &oe) {
			return nil, nil, stepError(StepOverlay, err)
		}
		return nil, nil, stepError(StepMount, err)
	}
	return n.files, view, nil
}

// loopbackOnly makes the calling thread's network namespace one with lo up
// and nothing else: no route leads anywhere (a connect to any address but
// lo's fails at once, ENETUNREACH), and no DNS answers. Nothing to judge, so
// no door.
func loopbackOnly() *wireError {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return stepError(StepLoopback, fmt.Errorf("open a netlink socket: %w", err))
	}
	defer nl.Close()
	if _, err := loopbackUp(nl); err != nil {
		return stepError(StepLoopback, err)
	}
	return nil
}

// loopbackUp sets the namespace's lo up and returns it. Every network
// namespace's lo is interface 1 (the kernel's LOOPBACK_IFINDEX), so it is
// not looked up: asking for it by name costs a dump of its attributes, 0.3
// ms of the init's CPU, mostly in the buffers it is read into. A kernel
// where it is not there is asked by name.
func loopbackUp(nl *netlink.Handle) (netlink.Link, error) {
	var lo netlink.Link = &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo"}}
	err := nl.LinkSetUp(lo)
	if errors.Is(err, unix.ENODEV) {
		if lo, err = nl.LinkByName("lo"); err != nil {
			return nil, fmt.Errorf("find lo: %w", err)
		}
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		return nil, fmt.Errorf("set lo up: %w", err)
	}
	return lo, nil
}

// configureNetns makes the calling thread's network namespace the wall: lo up
// with the run's addresses and default routes through it, the door's listeners,
// the nftables table. It returns the listeners' descriptors: transparent, DNS
// UDP, DNS TCP, and the wall's log of refusals when the kernel has one.
func configureNetns(ports []uint16, allTCP bool) ([]*os.File, *wireError) {
	// One netlink socket for every change below, rather than one each.
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, stepError(StepLoopback, fmt.Errorf("open a netlink socket: %w", err))
	}
	defer nl.Close()
	lo, err := loopbackUp(nl)
	if err != nil {
		return nil, stepError(StepLoopback, err)
	}
	if err := addRunAddrs(nl, lo); err != nil {
		return nil, stepError(StepLoopback, err)
	}
	// Without a source address the kernel would pick none for IPv4
	// destinations reached through lo (127.0.0.1 has host scope).
	v4 := &netlink.Route{LinkIndex: lo.Attrs().Index, Scope: netlink.SCOPE_LINK, Src: net.IPv4(127, 0, 0, 1).To4(),
		Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	if err := nl.RouteAdd(v4); err != nil {
		return nil, stepError(StepRoute, fmt.Errorf("add IPv4 default route via lo: %w", err))
	}
	v6 := &netlink.Route{LinkIndex: lo.Attrs().Index, Src: net.IPv6loopback,
		Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	if err := nl.RouteAdd(v6); err != nil && !ipv6Disabled(err) {
		return nil, stepError(StepRoute, fmt.Errorf("add IPv6 default route via lo: %w", err))
	}

	files, tport, dport, err := openListeners()
	if err != nil {
		return nil, stepError(StepListen, err)
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	// The refusals' log is an addition: a kernel without nflog, or without
	// nftables' log expression, gets the wall without it.
	cfg := RuleConfig{Ports: ports, AllTCP: allTCP, TransparentPort: tport, DNSPort: dport}
	wallLog, logErr := openWallLog()
	if logErr == nil {
		cfg.LogGroup = wallLogGroup
	}
	err = applyRules(cfg)
	if err != nil && wallLog != nil && !errors.Is(err, ErrBadRuleConfig) {
		wallLog.Close()
		wallLog = nil
		cfg.LogGroup = 0
		err = applyRules(cfg)
	}
	if err != nil {
		closeAll()
		if errors.Is(err, ErrBadRuleConfig) {
			return nil, &wireError{Step: StepNftables, Message: err.Error()}
		}
		return nil, stepError(StepNftables, err)
	}
	if wallLog != nil {
		files = append(files, wallLog)
	}
	return files, nil
}

// applyRules builds the wall's table for cfg and applies it in one transaction.
func applyRules(cfg RuleConfig) error {
	rs, err := buildRuleset(cfg)
	if err != nil {
		return err
	}
	conn, err := newBatchConn()
	if err != nil {
		return err
	}
	return rs.apply(conn)
}

// addRunAddrs gives lo one more address per family besides 127.0.0.1 and
// ::1. glibc's getaddrinfo with AI_ADDRCONFIG (Node's default) answers nothing
// on a machine with only those two, as if it were offline.
func addRunAddrs(nl *netlink.Handle, lo netlink.Link) error {
	v4 := &netlink.Addr{IPNet: &net.IPNet{IP: runAddr4.AsSlice(), Mask: net.CIDRMask(8, 32)}, Scope: int(netlink.SCOPE_HOST)}
	if err := nl.AddrAdd(lo, v4); err != nil {
		return fmt.Errorf("add %s to lo: %w", runAddr4, err)
	}
	v6 := &netlink.Addr{IPNet: &net.IPNet{IP: runAddr6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
	if err := nl.AddrAdd(lo, v6); err != nil && !ipv6Disabled(err) {
		return fmt.Errorf("add %s to lo: %w", runAddr6, err)
	}
	return nil
}

func ipv6Disabled(err error) bool {
	return errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EACCES)
}

// openListeners opens the door's sockets on both families' wildcard, which in
// a namespace with only lo means 127.0.0.1 and ::1, where redirect sends.
func openListeners() (files []*os.File, tport, dport uint16, err error) {
	tf, tport, err := listenSocket(unix.SOCK_STREAM, 0, "transparent")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("transparent listener: %w", err)
	}
	df, dport, err := listenSocket(unix.SOCK_STREAM, 0, "dns-tcp")
	if err != nil {
		tf.Close()
		return nil, 0, 0, fmt.Errorf("DNS TCP listener: %w", err)
	}
	uf, _, err := listenSocket(unix.SOCK_DGRAM, dport, "dns-udp")
	if err != nil {
		tf.Close()
		df.Close()
		return nil, 0, 0, fmt.Errorf("DNS UDP listener on port %d: %w", dport, err)
	}
	return []*os.File{tf, uf, df}, tport, dport, nil
}

// listenBacklog is what the door's listeners ask of listen(2). The kernel
// holds it to the namespace's net.core.somaxconn, which is what the net
// package would pass, having read it from /proc (and capped it at this).
const listenBacklog = 1<<16 - 1

// listenSocket opens a socket of sotype bound to port (0: one the kernel
// picks) on the wildcard of both families, or of IPv4 alone where the kernel
// has no IPv6, listening if it is a stream socket, as the net package's
// listeners on ":port" are; it returns it and its port. Made by hand, it
// needs nothing of /proc (the net package reads the listen backlog there,
// which the mounts made beside it seal) and none of the net package's setup
// in the init, 0.3 ms of its start ahead of both its legs.
func listenSocket(sotype int, port uint16, name string) (*os.File, uint16, error) {
	family := unix.AF_INET6
	fd, err := unix.Socket(family, sotype|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EAFNOSUPPORT) {
		family = unix.AF_INET
		fd, err = unix.Socket(family, sotype|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("socket: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(port)}
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return nil, 0, fmt.Errorf("take IPv4 on an IPv6 socket: %w", err)
		}
		sa = &unix.SockaddrInet6{Port: int(port)}
	}
	if sotype == unix.SOCK_STREAM {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return nil, 0, fmt.Errorf("SO_REUSEADDR: %w", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, 0, fmt.Errorf("bind port %d: %w", port, err)
	}
	if sotype == unix.SOCK_STREAM {
		if err := unix.Listen(fd, listenBacklog); err != nil {
			return nil, 0, fmt.Errorf("listen: %w", err)
		}
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		return nil, 0, fmt.Errorf("getsockname: %w", err)
	}
	switch a := bound.(type) {
	case *unix.SockaddrInet6:
		port = uint16(a.Port)
	case *unix.SockaddrInet4:
		port = uint16(a.Port)
	}
	ok = true
	return os.NewFile(uintptr(fd), name), port, nil
}

// hiddenRoots get a fresh tmpfs inside the run: host daemons' sockets (docker,
// ssh-agent, D-Bus, the user's runtime dir) and other runs' files are not there.
var hiddenRoots = []struct {
	path, mode string
}{{"/tmp", "1777"}, {"/run", "755"}, {"/dev/shm", "1777"}}

// privateMounts gives the run its own view (see layout_linux.go): nothing
// propagates back to the host, /tmp, /run and /dev/shm are empty tmpfs,
// resolv.conf still resolves, /proc shows only the run, the host is sealed
// read-only and the run's places are laid over it.
//
// proc mounts the run's /proc. It comes after every mount that names a
// descriptor as /proc/self/fd/N, which must still mean the caller's: where
// the caller is not in the run's pid namespace (a thread of postern's, see
// fast_linux.go), the run's /proc has no self for it. The masks, the
// kernel's files in /proc among them, come after it.
func privateMounts(cfg initConfig, proc func() error) (*mounted, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make / private: %w", err)
	}
	l := cfg.Layout
	view := &mounted{layout: l, layer: -1, home: -1, keep: -1}
	ok := false
	defer func() {
		if !ok {
			view.close()
		}
	}()
	held, err := capture(l, view)
	defer held.close()
	if err != nil {
		return nil, fmt.Errorf("hold the run's places: %w", err)
	}
	resolvPath, resolvData := resolvConfUnder()
	if err := sealHost(); err != nil {
		return nil, fmt.Errorf("make the host read-only: %w", err)
	}
	if err := ownDev(); err != nil {
		return nil, fmt.Errorf("give the run a /dev of its own: %w", err)
	}
	var base string
	for _, r := range hiddenRoots {
		if st, err := os.Stat(r.path); err != nil || !st.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", r.path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+r.mode); err != nil {
			return nil, fmt.Errorf("mount tmpfs on %s: %w", r.path, err)
		}
		if base == "" {
			base = r.path
		}
	}
	if base == "" {
		return nil, errors.New("no /tmp, /run or /dev/shm to keep the run's private layer under")
	}
	if resolvPath != "" {
		if err := os.MkdirAll(filepath.Dir(resolvPath), 0o755); err != nil {
			return nil, fmt.Errorf("recreate %s: %w", filepath.Dir(resolvPath), err)
		}
		if err := os.WriteFile(resolvPath, resolvData, 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", resolvPath, err)
		}
	}
	if err := installTrust(cfg.Trust); err != nil {
		return nil, err
	}
	if err := hidePaths(cfg.Hide); err != nil {
		return nil, err
	}
	layer, err := makeLayer(base, l)
	if err != nil {
		return nil, err
	}
	defer layer.close() // unless detachLayer handed it to view
	if err := ownTerminals(); err != nil {
		return nil, err
	}
	if err := applyLayout(l, held, layer); err != nil {
		return nil, err
	}
	if err := proc(); err != nil {
		return nil, err
	}
	if err := sealKernel(); err != nil {
		return nil, fmt.Errorf("make the kernel's settings unreachable: %w", err)
	}
	if err := applyMasks(l, layer); err != nil {
		return nil, err
	}
	if view.layer, err = detachLayer(layer); err != nil {
		return nil, err
	}
	ok = true
	return view, nil
}

// mountProc mounts a /proc of the calling process's pid namespace: the
// init's, which is the run's pid 1.
func mountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /proc: %w", err)
	}
	return nil
}

func underHiddenRoot(p string) bool {
	for _, r := range hiddenRoots {
		if strings.HasPrefix(p, r.path+"/") {
			return true
		}
	}
	return false
}

// resolvConfUnder finds where /etc/resolv.conf really lives; when that is under
// a hidden root (systemd-resolved's /run/systemd/resolve/stub-resolv.conf), it
// returns the path and contents to recreate there. Every port-53 packet goes
// to the door whatever nameserver it names.
func resolvConfUnder() (string, []byte) {
	real, err := filepath.EvalSymlinks("/etc/resolv.conf")
	if err != nil {
		// A dangling link still needs a target inside the run.
		if t, lerr := os.Readlink("/etc/resolv.conf"); lerr == nil {
			if !filepath.IsAbs(t) {
				t = filepath.Join("/etc", t)
			}
			real = filepath.Clean(t)
		} else {
			return "", nil
		}
	}
	if !underHiddenRoot(real) {
		return "", nil
	}
	data, err := os.ReadFile(real)
	if err != nil || len(data) == 0 {
		data = []byte("nameserver 127.0.0.53\n")
	}
	return real, data
}

// startCommand starts the command in a session of its own: with tty, the
// run's terminal is its controlling terminal; without, it has none. (In the
// caller's session its /dev/tty would be the caller's terminal, where TIOCSTI
// types into the shell that started postern.) The command is forked from a
// thread of the init that first gives up what the ExecArg stage gives up
// (see dropped); where that cannot start it as the stage would, the
// ExecArg stage starts it.
// It returns the pid and, where Landlock confines the command's connects,
// its connect notification descriptor (nil if none).
func startCommand(cfg initConfig, tty *runTerminal, starter *dropped) (int, *os.File, error) {
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	if tty != nil {
		attr.Files = tty.stdio()
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	}
	if starter != nil {
		if pid, err := starter.start(cfg.Command, attr); !errors.Is(err, errUseStage) {
			if err != nil {
				return 0, nil, fmt.Errorf("start %q in %s: %w", cfg.Command[0], cfg.Dir, err)
			}
			return pid, nil, nil
		}
	}
	argv := append([]string{os.Args[0], ExecArg}, cfg.Command...)
	// Landlock will refuse connects the wall never sees: the exec stage
	// sends its connect notifications back for them to be recorded
	// (connectwatch_linux.go).
	var mine, theirs *os.File
	if connectPorts(cfg.Env) != nil {
		var err error
		if mine, theirs, err = connectNotifyPair(); err == nil {
			attr.Files = append(attr.Files[:len(attr.Files):len(attr.Files)], theirs.Fd())
			attr.Env = append(attr.Env[:len(attr.Env):len(attr.Env)], fmt.Sprintf("%s=%d", connectNotifyEnv, connectNotifyFD))
		}
	}
	pid, err := syscall.ForkExec("/proc/self/exe", argv, attr)
	if theirs != nil {
		theirs.Close()
	}
	if err != nil {
		if mine != nil {
			mine.Close()
		}
		return 0, nil, fmt.Errorf("start %q in %s: %w", cfg.Command[0], cfg.Dir, err)
	}
	var notify *os.File
	if mine != nil {
		notify = recvConnectNotify(mine, 10*time.Second)
	}
	return pid, notify, nil
}

// spareThreads is how many idle threads the init keeps for its goroutines'
// blocking system calls (its reaper, control socket, signals, terminal).
const spareThreads = 8

// reserveThreads has the runtime make n threads of the process and keep
// them idle: n goroutines each hold a thread of their own at once, then
// give it back. The runtime never ends an idle thread and takes one before
// it makes a new one.
func reserveThreads(n int) {
	var held, done sync.WaitGroup
	held.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			held.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	close(release)
	done.Wait()
}
