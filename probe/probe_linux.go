package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
)

// The redirect rungs dial these from inside a wall. They are documentation
// addresses (RFC 5737, RFC 3849): inside the wall they can only be redirected,
// and nothing leaves even if the redirect fails.
var (
	redirectTarget4 = netip.MustParseAddrPort("192.0.2.1:443")
	redirectTarget6 = netip.MustParseAddrPort("[2001:db8::1]:443")
)

func rungs() []measurement {
	return []measurement{
		{RungUserns, measureUserns},
		{RungNetns, measureNetns},
		{RungNetnsRedirect, func(ctx context.Context) Rung { return measureRedirect(ctx, redirectTarget4) }},
		{RungIPv6, func(ctx context.Context) Rung { return measureRedirect(ctx, redirectTarget6) }},
		{RungLandlock, measureLandlock},
		{RungOverlay, measureOverlay},
		{RungContainer, measureContainer},
		{RungGPU, MeasureGPU},
	}
}

// osVersion: the kernel release says what a Linux machine can do.
func osVersion() string { return "" }

// childReport is what a probe child prints on stdout.
type childReport struct {
	Detail string `json:"detail,omitempty"`
	Step   string `json:"step,omitempty"`
	Error  string `json:"error,omitempty"`
	Errno  int    `json:"errno,omitempty"`
}

func (r childReport) err() error {
	if r.Error == "" {
		return nil
	}
	return &childError{msg: r.Error, errno: syscall.Errno(r.Errno)}
}

// childError is a child's failure; it unwraps to the errno the kernel gave.
type childError struct {
	msg   string
	errno syscall.Errno
}

func (e *childError) Error() string { return e.msg }

func (e *childError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

func idMaps() ([]syscall.SysProcIDMap, []syscall.SysProcIDMap) {
	uid, gid := os.Getuid(), os.Getgid()
	return []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
}

// runChild runs the probe binary with arg in the namespaces attr asks for and
// returns the report it printed. A kernel refusal to create the namespaces
// is returned as the error of starting it, with started false.
func runChild(ctx context.Context, arg string, attr *syscall.SysProcAttr, args ...string) (rep childReport, started bool, err error) {
	cmd := exec.CommandContext(ctx, netwall.Self, append([]string{arg}, args...)...)
	cmd.Args[0] = netwall.Self
	cmd.SysProcAttr = attr
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if attr.Cloneflags&unix.CLONE_NEWUSER == 0 {
		// No user namespace of its own: started as the wall starts its
		// init, holding what the init may hold and no more.
		release, err := netwall.StartBounded(cmd)
		if err != nil {
			return childReport{}, false, err
		}
		defer release()
	} else if err := cmd.Start(); err != nil {
		return childReport{}, false, err
	}
	werr := cmd.Wait()
	if jerr := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); jerr != nil {
		return childReport{}, true, fmt.Errorf("probe child %s: %v (%v; stderr %q)", arg, werr, jerr, strings.TrimSpace(stderr.String()))
	}
	return rep, true, nil
}

func measureUserns(ctx context.Context) Rung {
	uids, gids := idMaps()
	rep, _, err := runChild(ctx, UsernsArg, &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER,
		UidMappings:                uids,
		GidMappings:                gids,
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                []uintptr{unix.CAP_SYS_ADMIN},
		Pdeathsig:                  syscall.SIGKILL,
	})
	if err == nil {
		err = rep.err()
	}
	if err != nil {
		return no(fmt.Sprintf("create a user namespace and map uid %d: %v", os.Getuid(), err), netwall.Remedy(netwall.StepUserns, err))
	}
	return yes(rep.Detail)
}

// wallChild is one way to clone a probe child into the namespaces a rung
// measures: how, what that makes, and the child's first arguments.
type wallChild struct {
	attr *syscall.SysProcAttr
	what string
	args []string
}

// wallChildren are the ways the wall would clone into namespaces flags, in
// the order it tries them (see netwall's startInit): where this process holds
// the wall's capabilities already (netwall.HoldsInitCaps), as root does, with
// no user namespace, from a bounded thread; then with a user namespace of its
// own holding caps. kind is what the namespace of flags is called.
func wallChildren(flags uintptr, kind string, caps ...uintptr) []wallChild {
	uids, gids := idMaps()
	userns := wallChild{attr: &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER | flags,
		UidMappings:                uids,
		GidMappings:                gids,
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                caps,
		Pdeathsig:                  syscall.SIGKILL,
	}, what: "user and " + kind + " namespaces"}
	if !netwall.HoldsInitCaps() {
		return []wallChild{userns}
	}
	return []wallChild{{attr: &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL},
		what: "a " + kind + " namespace (with no user namespace: this user holds the wall's capabilities)", args: []string{noUserns}},
		userns}
}

// runWallChild runs the probe child arg, with extra after its own arguments,
// cloned the first of ways that starts, as the wall's init would be; it says
// what that made. When none starts, the error is the last way's, with the
// one before it told beside it.
func runWallChild(ctx context.Context, arg string, ways []wallChild, extra ...string) (childReport, string, error) {
	var before error
	for i, w := range ways {
		rep, started, err := runChild(ctx, arg, w.attr, append(slices.Clone(w.args), extra...)...)
		if started || i == len(ways)-1 {
			if err != nil && !started && before != nil {
				err = fmt.Errorf("%w (before that, %s: %v)", err, ways[i-1].what, before)
			}
			return rep, w.what, err
		}
		before = err
	}
	return childReport{}, "", errors.New("no way to clone a probe child")
}

// noUserns, first of a probe child's arguments, says it has no user
// namespace of its own to check.
const noUserns = "--no-userns"

func measureNetns(ctx context.Context) Rung {
	rep, what, err := runWallChild(ctx, NetnsArg, wallChildren(unix.CLONE_NEWNET, "network", unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN))
	if err != nil {
		return no(fmt.Sprintf("create %s: %v", what, err), netwall.Remedy(netwall.StepUserns, err))
	}
	if err := rep.err(); err != nil {
		return no(fmt.Sprintf("configure the network namespace (%s): %v", rep.Step, err), netwall.Remedy(rep.Step, err))
	}
	return yes(rep.Detail)
}

// measureRedirect raises a real wall whose policy has target's port, runs
// ConnectArg target inside it and checks that the connection reached the
// wall's transparent listener with target as its original destination.
func measureRedirect(ctx context.Context, target netip.AddrPort) Rung {
	start := time.Now()
	pr, pw, err := os.Pipe()
	if err != nil {
		return no(fmt.Sprintf("pipe: %v", err), "")
	}
	defer pr.Close()
	output := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(pr, 64<<10))
		output <- strings.TrimSpace(string(b))
	}()
	// A directory of the rung's own to work in: a run never works in the
	// home or the machine's directories.
	dir, err := os.MkdirTemp("", "postern-probe-")
	if err != nil {
		pw.Close()
		<-output
		return no(fmt.Sprintf("make a directory to run in: %v", err), "")
	}
	defer os.RemoveAll(dir)
	w, err := netwall.Raise(ctx, netwall.Spec{
		Command: []string{"/proc/self/exe", ConnectArg, target.String()},
		Dir:     dir,
		Ports:   []uint16{target.Port()},
		Stdout:  pw,
		Stderr:  pw,
	})
	pw.Close()
	if err != nil {
		<-output
		var ke *netwall.KernelError
		if errors.As(err, &ke) {
			return no(fmt.Sprintf("raise a wall: %v", ke.Err), ke.Remedy)
		}
		return no(fmt.Sprintf("raise a wall: %v", err), "")
	}
	defer w.Close()
	// The wall's refusals reach the door when the kernel can log them.
	logged := "its refusals are recorded (nflog)"
	if w.Listeners().WallLog == nil {
		logged = "its refusals are not recorded: the kernel lacks nflog or nftables' log expression (CONFIG_NETFILTER_NETLINK_LOG, CONFIG_NFT_LOG)"
	}

	seen := make(chan result, 1)
	go serveOnce(w.Listeners().Transparent, seen)
	if err := w.Start(ctx); err != nil {
		w.Close()
		<-output
		return no(fmt.Sprintf("start the connecting child inside the wall: %v", err), "")
	}
	code, werr := w.Wait()
	w.Close() // ends serveOnce if nothing came
	got := <-seen
	out := <-output
	took := time.Since(start).Milliseconds()

	remedy := netwall.Remedy(netwall.StepNftables, nil)
	if target.Addr().Is6() {
		remedy = "IPv6 is unavailable or not redirected: boot without ipv6.disable=1, set " +
			"net.ipv6.conf.all.disable_ipv6=0 and net.ipv6.conf.default.disable_ipv6=0, enable CONFIG_IPV6 and CONFIG_NF_NAT (IPv6)"
	}
	switch {
	case got.err != nil:
		return no(fmt.Sprintf("a connection to %s inside the wall did not reach the door: %v (child exit %d %v: %s)", target, got.err, code, werr, out), remedy)
	case got.dst != target:
		return no(fmt.Sprintf("a connection to %s reached the door with original destination %s", target, got.dst), remedy)
	case werr != nil || code != 0:
		return no(fmt.Sprintf("the connecting child inside the wall failed (exit %d %v): %s", code, werr, out), remedy)
	}
	return yes(fmt.Sprintf("%s inside the wall reached the door, original destination read back (%d ms); %s", target, took, logged))
}

type result struct {
	dst netip.AddrPort
	err error
}

// serveOnce answers the first connection on l as the door would: read its
// original destination, then the child's hello, then say ok.
func serveOnce(l net.Listener, seen chan<- result) {
	if tl, ok := l.(*net.TCPListener); ok {
		tl.SetDeadline(time.Now().Add(rungTimeout))
	}
	c, err := l.Accept()
	if err != nil {
		seen <- result{err: fmt.Errorf("accept: %w", err)}
		return
	}
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		seen <- result{err: fmt.Errorf("accepted a %T, not TCP", c)}
		return
	}
	dst, err := door.OriginalDst(tc)
	if err != nil {
		seen <- result{err: err}
		return
	}
	seen <- result{dst: dst, err: answerHello(c)}
}

func measureLandlock(ctx context.Context) Rung {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == unix.ENOSYS:
		return no("landlock_create_ruleset: function not implemented",
			"the kernel lacks Landlock: use Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK=y")
	case errno == unix.EOPNOTSUPP:
		return no("landlock_create_ruleset: Landlock is built in but not enabled",
			"add landlock to the lsm= kernel boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor,bpf) or set CONFIG_LSM to include it")
	case errno != 0:
		return no(fmt.Sprintf("landlock_create_ruleset: %v", errno), "")
	}
	return yes(fmt.Sprintf("abi %d", abi))
}

// ChildMain runs the probe child named by arg (ConnectArg, UsernsArg or
// NetnsArg) with its arguments, reports on stdout and returns the exit status.
func ChildMain(ctx context.Context, arg string, args []string, stdout io.Writer) int {
	switch arg {
	case ConnectArg:
		if len(args) != 1 {
			fmt.Fprintf(stdout, "usage: %s ADDR:PORT\n", ConnectArg)
			return 2
		}
		if err := sayHello(ctx, args[0]); err != nil {
			fmt.Fprintln(stdout, err)
			return 1
		}
		fmt.Fprintln(stdout, probeOK)
		return 0
	case OverlayArg:
		rep, own := checkOwnUserns(&args)
		if rep.Error == "" {
			if len(args) != 1 {
				rep = childReport{Error: "usage: " + OverlayArg + " DIR"}
			} else {
				rep = checkOverlay(args[0], own)
			}
		}
		b, _ := json.Marshal(rep)
		fmt.Fprintln(stdout, string(b))
		if rep.Error != "" {
			return 1
		}
		return 0
	case UsernsArg, NetnsArg:
		rep, _ := checkOwnUserns(&args)
		if arg == NetnsArg && rep.Error == "" {
			rep = checkNetns()
		}
		b, _ := json.Marshal(rep)
		fmt.Fprintln(stdout, string(b))
		if rep.Error != "" {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "unknown probe child %q\n", arg)
	return 2
}

func report(step string, err error) childReport {
	rep := childReport{Step: step, Error: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		rep.Errno = int(errno)
	}
	return rep
}

// checkOwnUserns is checkUserns, unless args begins with noUserns, which it
// takes off them; own says which.
func checkOwnUserns(args *[]string) (rep childReport, own bool) {
	if len(*args) > 0 && (*args)[0] == noUserns {
		*args = (*args)[1:]
		// Started bounded (see runChild): what it measures, it measures
		// with the init's capabilities, not root's.
		if err := netwall.CheckBounded(); err != nil {
			return report("capabilities", err), false
		}
		return childReport{}, false
	}
	return checkUserns(), true
}

// checkUserns runs inside a new user namespace.
func checkUserns() childReport {
	uidMap, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return report(netwall.StepUserns, err)
	}
	f := strings.Fields(string(uidMap))
	if len(f) != 3 || f[0] != f[1] {
		return report(netwall.StepUserns, fmt.Errorf("uid_map is %q, want this uid mapped to itself", strings.TrimSpace(string(uidMap))))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return report(netwall.StepUserns, err)
	}
	if caps[0].Effective&(1<<unix.CAP_SYS_ADMIN) == 0 {
		return report(netwall.StepUserns, fmt.Errorf("no CAP_SYS_ADMIN inside the new user namespace: %w", syscall.EPERM))
	}
	return childReport{Detail: fmt.Sprintf("uid %s mapped to itself in a new user namespace, with capabilities inside it", f[0])}
}

// checkNetns runs inside new user and network namespaces.
func checkNetns() childReport {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return report(netwall.StepLoopback, err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return report(netwall.StepLoopback, fmt.Errorf("set lo up: %w", err))
	}
	v4 := &netlink.Route{LinkIndex: lo.Attrs().Index, Scope: netlink.SCOPE_LINK, Src: net.IPv4(127, 0, 0, 1).To4(),
		Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	if err := netlink.RouteAdd(v4); err != nil {
		return report(netwall.StepRoute, fmt.Errorf("add IPv4 default route via lo: %w", err))
	}
	v6 := &netlink.Route{LinkIndex: lo.Attrs().Index, Src: net.IPv6loopback,
		Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	v6err := netlink.RouteAdd(v6)
	routable := []string{}
	for _, a := range []netip.Addr{redirectTarget4.Addr(), redirectTarget6.Addr()} {
		if a.Is6() && v6err != nil {
			continue
		}
		rs, err := netlink.RouteGet(a.AsSlice())
		if err != nil || len(rs) == 0 || rs[0].LinkIndex != lo.Attrs().Index {
			return report(netwall.StepRoute, fmt.Errorf("%s is not routable via lo: %v", a, err))
		}
		routable = append(routable, a.String())
	}
	detail := fmt.Sprintf("lo up with default routes through it; %s routable", strings.Join(routable, " and "))
	if v6err != nil {
		detail += fmt.Sprintf("; no IPv6 default route (%v)", v6err)
	}
	return childReport{Detail: detail}
}

// remedyOverlay is what lets the wall lay its private layers.
const remedyOverlay = "the wall keeps what a run writes in its home in an overlay whose upper layer is a tmpfs of the run's user namespace: " +
	"use Linux 6.6 or later (tmpfs with user extended attributes; overlayfs in user namespaces since 5.11, mount_setattr since 5.12) " +
	"built with CONFIG_OVERLAY_FS and CONFIG_TMPFS_XATTR; when postern runs in a container, seccomp must allow mount, open_tree and move_mount"

// measureOverlay lays a private layer over a directory of its own in a child
// of new user and mount namespaces, as the wall does over a run's home.
func measureOverlay(ctx context.Context) Rung {
	dir, err := os.MkdirTemp("", "postern-probe-overlay-")
	if err != nil {
		return no(fmt.Sprintf("make a directory to lay the layer over: %v", err), "")
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"lower/gone", "lower/sub", "layer"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return no(fmt.Sprintf("prepare %s: %v", dir, err), "")
		}
	}
	for _, f := range []string{"lower/keep", "lower/gone/old", "lower/sub/f"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("host\n"), 0o644); err != nil {
			return no(fmt.Sprintf("prepare %s: %v", dir, err), "")
		}
	}
	rep, what, err := runWallChild(ctx, OverlayArg, wallChildren(unix.CLONE_NEWNS, "mount", unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE), dir)
	if err != nil {
		return no(fmt.Sprintf("create %s: %v", what, err), netwall.Remedy(netwall.StepUserns, err))
	}
	if err := rep.err(); err != nil {
		return no(fmt.Sprintf("lay a private layer (%s): %v", rep.Step, err), remedyOverlay)
	}
	// What the child wrote stayed in its layer.
	for f, want := range map[string]string{"lower/keep": "host\n", "lower/gone/old": "host\n", "lower/sub/f": "host\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != want {
			return no(fmt.Sprintf("a write through the layer reached %s: %q, %v", f, b, err), remedyOverlay)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "lower", "new")); err == nil {
		return no("a file made through the layer appeared below it", remedyOverlay)
	}
	return yes(rep.Detail)
}

// checkOverlay runs inside a new mount namespace, in a new user namespace
// of its own where ownUserns: it lays a tmpfs layer over dir/lower, changes
// what is there every way a run may, checks what it sees, and clones and
// attaches a read-only mount as the wall does.
func checkOverlay(dir string, ownUserns bool) childReport {
	step := "overlay"
	fail := func(err error) childReport { return report(step, err) }
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("make / private: %w", err))
	}
	lower := filepath.Join(dir, "lower")
	layer := filepath.Join(dir, "layer")
	lfd, err := unix.Open(lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(lfd)
	if err := unix.Mount("tmpfs", layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fail(fmt.Errorf("mount tmpfs: %w", err))
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(layer, d), 0o700); err != nil {
			return fail(err)
		}
	}
	opts := fmt.Sprintf("userxattr,lowerdir=/proc/self/fd/%d,upperdir=%s/upper,workdir=%s/work", lfd, layer, layer)
	if err := unix.Mount("overlay", lower, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fail(fmt.Errorf("mount overlay: %w", err))
	}
	if err := os.WriteFile(filepath.Join(lower, "new"), []byte("run\n"), 0o644); err != nil {
		return fail(fmt.Errorf("make a file through the layer: %w", err))
	}
	if err := os.WriteFile(filepath.Join(lower, "keep"), []byte("run\n"), 0o644); err != nil {
		return fail(fmt.Errorf("change a file through the layer (copy-up): %w", err))
	}
	if err := os.RemoveAll(filepath.Join(lower, "gone")); err != nil {
		return fail(fmt.Errorf("remove a directory through the layer (whiteout): %w", err))
	}
	if err := os.Mkdir(filepath.Join(lower, "gone"), 0o755); err != nil {
		return fail(fmt.Errorf("make a removed directory again (opaque directory; tmpfs needs user extended attributes): %w", err))
	}
	if ents, err := os.ReadDir(filepath.Join(lower, "gone")); err != nil || len(ents) != 0 {
		return fail(fmt.Errorf("a directory made again through the layer shows what was removed: %v %v", ents, err))
	}
	if b, err := os.ReadFile(filepath.Join(lower, "keep")); err != nil || string(b) != "run\n" {
		return fail(fmt.Errorf("the layer does not show what was written: %q %v", b, err))
	}
	step = netwall.StepMount
	tree, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(lower, "sub"), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fail(fmt.Errorf("open_tree: %w", err))
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fail(fmt.Errorf("mount_setattr: %w", err))
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, filepath.Join(lower, "sub"), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail(fmt.Errorf("move_mount: %w", err))
	}
	if err := os.WriteFile(filepath.Join(lower, "sub", "f"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		return fail(fmt.Errorf("a mount made read-only was written: %v", err))
	}
	where := "in a user namespace"
	if !ownUserns {
		where = "in a mount namespace"
	}
	return childReport{Detail: "overlay with a tmpfs upper " + where + ": copy-up, whiteouts and opaque directories work; " +
		"open_tree, mount_setattr and move_mount lay a read-only place over it"}
}
