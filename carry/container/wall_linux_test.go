package container

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/procstat"
)

// outFile is a pipe whose read side is collected until the write side closes.
type outFile struct {
	w    *os.File
	done chan string
}

func newOut(t *testing.T) *outFile {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o := &outFile{w: w, done: make(chan string, 1)}
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		r.Close()
		o.done <- b.String()
	}()
	t.Cleanup(func() { w.Close() })
	return o
}

// text closes the write side and returns everything written.
func (o *outFile) text(t *testing.T) string {
	t.Helper()
	o.w.Close()
	select {
	case s := <-o.done:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("output did not end")
		return ""
	}
}

func raise(t *testing.T, spec Spec) *Wall {
	t.Helper()
	if spec.Self == "" {
		spec.Self = harnessBin(t)
	}
	if spec.Run == "" {
		spec.Run = fmt.Sprintf("test-%d", time.Now().UnixNano())
	}
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	w, err := Raise(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raised %s in %d ms", w.Name(), time.Since(t0).Milliseconds())
	t.Cleanup(func() { w.Close() })
	return w
}

// tWriter logs each write to t.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitCode(t *testing.T, w *Wall) int {
	t.Helper()
	type res struct {
		code int
		err  error
	}
	c := make(chan res, 1)
	go func() {
		code, err := w.Wait()
		c <- res{code, err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("wait: %v", r.err)
		}
		return r.code
	case <-time.After(time.Minute):
		t.Fatal("the container's command did not end within a minute")
		return 0
	}
}

func assertGone(t *testing.T, e *Engine, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := e.output(ctx, "ps", "--all", "--format", "{{.Names}}", "--filter", "name=^"+name+"$")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("container %s still exists: %q", name, out)
	}
}

// serveTransparent answers each connection on l with its original destination
// followed by what the client sent on its first line.
func serveTransparent(l net.Listener, seen chan<- netip.AddrPort) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			dst, err := door.OriginalDst(c.(*net.TCPConn))
			if err != nil {
				fmt.Fprintf(c, "error %v\n", err)
				return
			}
			seen <- dst
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "door saw %s %s\n", dst, strings.TrimSpace(line))
		}()
	}
}

func TestWalledRoundTripExitStatusAndRemoval(t *testing.T) {
	e := requirePodman(t)
	img := busyboxImage(t, e)
	out, errOut := newOut(t), newOut(t)
	w := raise(t, Spec{Engine: e, Image: img, Ports: []uint16{443},
		Command: []string{"sh", "-c", `echo hello | nc 192.0.2.1 443; echo hello6 | nc 2001:db8::1 443; ` +
			`if echo x | nc -w 2 192.0.2.1 8080; then echo port-8080-open; fi; echo err >&2; exit 7`},
		Stdout: out.w, Stderr: errOut.w})
	seen := make(chan netip.AddrPort, 4)
	go serveTransparent(w.Listeners().Transparent, seen)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 7 {
		t.Errorf("exit status %d, want 7", code)
	}
	w.Close()
	stdout, stderr := out.text(t), errOut.text(t)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	for _, want := range []string{"door saw 192.0.2.1:443 hello", "door saw [2001:db8::1]:443 hello6"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout %q lacks %q", stdout, want)
		}
	}
	if strings.Contains(stdout, "port-8080-open") {
		t.Errorf("a port outside the policy connected: %q", stdout)
	}
	if !strings.Contains(stderr, "err") {
		t.Errorf("stderr %q lacks the command's own", stderr)
	}
	close(seen)
	var dsts []string
	for d := range seen {
		dsts = append(dsts, d.String())
	}
	if len(dsts) != 2 {
		t.Errorf("the door saw %v, want exactly the two connections to port 443", dsts)
	}
	assertGone(t, e, w.Name())
}

func TestCommandNotFoundIs127(t *testing.T) {
	e := requirePodman(t)
	errOut := newOut(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Command: []string{"no-such-command"}, Stderr: errOut.w})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 127 {
		t.Errorf("exit %d, want 127", code)
	}
	w.Close()
	if s := errOut.text(t); !strings.Contains(s, "command not found") || !strings.Contains(s, "no-such-command") {
		t.Errorf("stderr %q does not say what was not found", s)
	}
}

func TestSignalsReachTheCommandsGroup(t *testing.T) {
	e := requirePodman(t)
	out := newOut(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Stdout: out.w,
		Command: []string{"sh", "-c", `trap 'echo usr1; exit 4' USR1; echo ready; while :; do sleep 0.1; done`}})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != ErrAlreadyStarted {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := w.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 4 {
		t.Errorf("exit %d, want the trap's 4", code)
	}
	w.Close()
	if s := out.text(t); !strings.Contains(s, "usr1") {
		t.Errorf("stdout %q: the trap did not run", s)
	}
	if err := w.Signal(syscall.SIGTERM); err != ErrClosed {
		t.Errorf("Signal after Close: %v, want ErrClosed", err)
	}
}

func TestKilledCommandReports128PlusSignal(t *testing.T) {
	e := requirePodman(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Command: []string{"sleep", "3004"}})
	if err := w.Signal(syscall.SIGTERM); err != ErrNotStarted {
		t.Errorf("Signal before Start: %v, want ErrNotStarted", err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGKILL))
	}
}

func TestCloseWhileRunningLeavesNothing(t *testing.T) {
	e := requirePodman(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), Ports: []uint16{443},
		Command: []string{"sh", "-c", "sleep 3002 & sleep 3002; wait"}})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run's sleeps", func() bool { return len(procsWithArg("3002")) == 2 })
	dir := w.dir
	t0 := time.Now()
	w.Close()
	t.Logf("closed in %d ms", time.Since(t0).Milliseconds())
	w.Close()
	assertGone(t, e, w.Name())
	if pids := procsWithArg("3002"); len(pids) != 0 {
		t.Errorf("the run's processes outlived Close: %v", pids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the host's directory for the container is still there: %v", err)
	}
	if _, err := w.Listeners().Transparent.Accept(); err == nil {
		t.Error("the door's listener still accepts after Close")
	}
}

func TestNoNetworkHasNoRouteAndNoListeners(t *testing.T) {
	e := requirePodman(t)
	out := newOut(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Stdout: out.w, Stderr: out.w,
		Command: []string{"sh", "-c", "ip route; ip -6 route; nc -w 2 192.0.2.1 443 </dev/null; echo nc=$?"}})
	if l := w.Listeners(); l.Transparent != nil || l.DNSUDP != nil || l.DNSTCP != nil {
		t.Errorf("listeners for a container with no network: %+v", l)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitCode(t, w)
	w.Close()
	s := out.text(t)
	if strings.Contains(s, "default") || !strings.Contains(s, "nc=1") || !strings.Contains(s, "unreachable") {
		t.Errorf("output %q: want no routes and an unreachable network", s)
	}
}

// TestOnlyTheContainersInitIsAccepted: a process that is not the container's
// init reaching the control socket is refused.
func TestOnlyTheContainersInitIsAccepted(t *testing.T) {
	e := requirePodman(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Command: []string{"true"}})
	sock := t.TempDir() + "/c.sock"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, `{"type":"hello","version":%d}`+"\n", protocolVersion)
	peer, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.accept(ctx, peer)
	if err == nil || !strings.Contains(err.Error(), "refusing it") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("accept of this test process: %v, want a refusal naming pid %d", err, os.Getpid())
	}
}

func TestSweepRemovesOnlyOrphans(t *testing.T) {
	e := requirePodman(t)
	img := busyboxImage(t, e)
	// A raise first, so that the engine's resource limits are adapted.
	w := raise(t, Spec{Engine: e, Image: img, NoNetwork: true, Command: []string{"true"}})
	w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(name, pid, pidStart string) {
		args := append([]string{"run", "--detach", "--rm", "--name", name, "--network", "none",
			"--label", LabelRun + "=" + name, "--label", LabelPid + "=" + pid, "--label", LabelPidStart + "=" + pidStart},
			e.ulimitFlags()...)
		args = append(args, "--entrypoint", "/bin/sleep", img, "300")
		if _, err := e.output(ctx, args...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = e.output(context.Background(), "rm", "--force", "--time", "0", name) })
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	orphan, owned := "postern-test-orphan-"+suffix, "postern-test-owned-"+suffix
	start(orphan, "2147483646", "1")
	start(owned, fmt.Sprint(os.Getpid()), fmt.Sprint(procstat.StartTime(os.Getpid())))
	// A directory a killed postern left behind, and one of a live one.
	deadDir, err := os.MkdirTemp("", dirPrefix+"2147483646.1-")
	if err != nil {
		t.Fatal(err)
	}
	liveDir, err := os.MkdirTemp("", fmt.Sprintf("%s%d.%d-", dirPrefix, os.Getpid(), procstat.StartTime(os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(liveDir)
	if err := Sweep(ctx, e); err != nil {
		t.Fatal(err)
	}
	assertGone(t, e, orphan)
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("the directory of a dead postern is still there: %v", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("Sweep removed the directory of a live postern: %v", err)
	}
	if !w.eng.containerExists(ctx, owned) {
		t.Errorf("Sweep removed %s, whose controller (this test) is alive", owned)
	}
}

// procsWithArg lists processes whose command line has arg as an argument.
func procsWithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				var pid int
				fmt.Sscan(e.Name(), &pid)
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDetectDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := Detect(ctx, Docker)
	if err == nil {
		if e.Name != Docker || e.Version == "" {
			t.Fatalf("docker detected as %+v", e)
		}
		return
	}
	if !errors.Is(err, ErrNoEngine) {
		t.Fatalf("error %v is not ErrNoEngine", err)
	}
	var ee *EngineError
	if !errors.As(err, &ee) || len(ee.Tried) != 1 || ee.Remedy == "" {
		t.Fatalf("error %#v, want an *EngineError with what was tried and a remedy", err)
	}
	if _, lerr := exec.LookPath("docker"); lerr == nil {
		if !strings.Contains(ee.Tried[0], "cannot run containers") {
			t.Errorf("docker CLI installed: %q should say it cannot run containers", ee.Tried[0])
		}
	} else if !strings.Contains(ee.Tried[0], "not found in PATH") {
		t.Errorf("no docker CLI: %q should say so", ee.Tried[0])
	}
	if _, err := Detect(ctx, "lxc"); err == nil || errors.Is(err, ErrNoEngine) {
		t.Errorf("unknown engine name: %v", err)
	}
}

func TestRaiseRemembersTheEngine(t *testing.T) {
	e := requirePodman(t)
	w := raise(t, Spec{Engine: e, Image: busyboxImage(t, e), NoNetwork: true, Command: []string{"true"}})
	w.Close()
	got := recall(Podman)
	if got == nil {
		t.Fatal("nothing remembered after a container ran")
	}
	if got.Path != e.Path || got.Version != e.Version || strings.Join(got.ulimitFlags(), " ") != strings.Join(e.ulimitFlags(), " ") ||
		strings.Join(got.global, " ") != strings.Join(e.global, " ") || !got.remembered {
		t.Fatalf("remembered %+v, want %+v", got, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	r, err := DetectRemembered(ctx, Podman)
	if err != nil || !r.remembered {
		t.Fatalf("DetectRemembered: %+v, %v", r, err)
	}
	t.Logf("recalled in %d µs", time.Since(t0).Microseconds())
	if recall(Docker) != nil {
		t.Error("docker recalled though only podman was remembered")
	}
	// A remembered engine whose runtime refuses to start anything is forgotten.
	r.global = append(r.global, "--runtime", "/nonexistent/runtime")
	if _, err := Raise(ctx, Spec{Engine: r, Image: busyboxImage(t, e), NoNetwork: true, Command: []string{"true"}, Self: harnessBin(t)}); err == nil {
		t.Fatal("a container started with a runtime that does not exist")
	}
	if recall(Podman) != nil {
		t.Fatal("an engine that failed to start a container is still remembered")
	}
}

// TestRaiseAndCloseLeakNothing: descriptors and goroutines return to where they
// were after walled containers come and go.
func TestRaiseAndCloseLeakNothing(t *testing.T) {
	e := requirePodman(t)
	img := busyboxImage(t, e)
	cycle := func() {
		w := raise(t, Spec{Engine: e, Image: img, Ports: []uint16{80, 443}, Command: []string{"true"}})
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitCode(t, w)
		w.Close()
	}
	cycle() // warm up: the engine's limits adapted, the runtime's lazy state
	fds, gs := countFDs(t), runtime.NumGoroutine()
	for range 3 {
		cycle()
	}
	time.Sleep(200 * time.Millisecond)
	if got := countFDs(t); got > fds {
		t.Errorf("descriptors: %d before, %d after three containers", fds, got)
	}
	if got := runtime.NumGoroutine(); got > gs {
		t.Errorf("goroutines: %d before, %d after three containers", gs, got)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Raising a wall touches no other run's container: one whose controller this
// process cannot see alive (another pid namespace's postern looks exactly
// so) is still there after a raise, a run and a close.
func TestRaiseLeavesOtherRunsContainers(t *testing.T) {
	e := requirePodman(t)
	img := busyboxImage(t, e)
	w := raise(t, Spec{Engine: e, Image: img, NoNetwork: true, Command: []string{"true"}})
	w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := fmt.Sprintf("postern-test-other-%d", time.Now().UnixNano())
	args := append([]string{"run", "--detach", "--rm", "--name", other, "--network", "none",
		"--label", LabelRun + "=" + other, "--label", LabelPid + "=2147483646", "--label", LabelPidStart + "=1"},
		e.ulimitFlags()...)
	args = append(args, "--entrypoint", "/bin/sleep", img, "300")
	if _, err := e.output(ctx, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.output(context.Background(), "rm", "--force", "--time", "0", other) })

	w = raise(t, Spec{Engine: e, Image: img, NoNetwork: true, Command: []string{"true"}})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	w.Close()
	if !e.containerExists(ctx, other) {
		t.Fatalf("raising a wall removed %s, another run's container", other)
	}
}
