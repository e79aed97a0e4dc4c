package netwall

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// asUserEnv is set when TestWallUnprivileged re-runs this binary as an
// unprivileged uid: the wall tests then run without root, as the product does.
const asUserEnv = testhosts.AsUserEnv

// fakeIP is what the test DNS answers for every name.
const fakeIP = "198.18.0.7"

func requireRoot(t *testing.T) {
	t.Helper()
	testhosts.Kernel(t)
	if os.Geteuid() == 0 || os.Getenv(asUserEnv) == "1" {
		return
	}
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("needs root (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping)")
	}
	t.Skip("needs root")
}

// testDoor serves a wall's listeners as a minimal door: the transparent
// listener answers each connection with its original destination as an HTTP
// body; DNS answers every A query with fakeIP.
type testDoor struct {
	mu       sync.Mutex
	origDsts []netip.AddrPort
	queries  []string // "udp example.com." / "tcp example.com."

	wg      sync.WaitGroup
	servers []*dns.Server
}

func serveDoor(t *testing.T, lis door.Listeners) *testDoor {
	t.Helper()
	d := &testDoor{}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := lis.Transparent.Accept()
			if err != nil {
				return
			}
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				d.answer(c.(*net.TCPConn))
			}()
		}
	}()
	for _, srv := range []*dns.Server{
		{PacketConn: lis.DNSUDP, Handler: d.dnsHandler("udp")},
		{Listener: lis.DNSTCP, Handler: d.dnsHandler("tcp")},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			_ = srv.ActivateAndServe()
		}()
		<-started
		d.servers = append(d.servers, srv)
	}
	t.Cleanup(func() {
		for _, s := range d.servers {
			_ = s.Shutdown()
		}
		lis.Transparent.Close()
		d.wg.Wait()
	})
	return d
}

func (d *testDoor) answer(c *net.TCPConn) {
	defer c.Close()
	dst, err := door.OriginalDst(c)
	body := dst.String()
	if err != nil {
		body = "no original destination: " + err.Error()
	} else {
		d.mu.Lock()
		d.origDsts = append(d.origDsts, dst)
		d.mu.Unlock()
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for { // read the request head so closing does not reset the client
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func (d *testDoor) dnsHandler(network string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			d.mu.Lock()
			d.queries = append(d.queries, network+" "+q.Name)
			d.mu.Unlock()
			if q.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + fakeIP)
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	}
}

func (d *testDoor) seen() ([]netip.AddrPort, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]netip.AddrPort(nil), d.origDsts...), append([]string(nil), d.queries...)
}

type runResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
	door           *testDoor
	ending         Ending // what Wall.Ending said after the run
}

// runWalled raises a wall around argv with ports, serves it with a testDoor,
// runs argv to its end and tears everything down.
func runWalled(t *testing.T, ports []uint16, argv ...string) runResult {
	t.Helper()
	return runSpec(t, Spec{Command: argv, Ports: ports}, nil)
}

func runSpec(t *testing.T, spec Spec, during func(w *Wall)) runResult {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	if spec.Stdout == nil {
		spec.Stdout = stdout
	}
	if spec.Stderr == nil {
		spec.Stderr = stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := Raise(ctx, spec)
	if err != nil {
		t.Fatalf("Raise(%q): %v", spec.Command, err)
	}
	defer w.Close()
	d := serveDoor(t, w.Listeners())
	start := time.Now()
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("Start(%q): %v", spec.Command, err)
	}
	if during != nil {
		during(w)
	}
	code, err := w.Wait()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Wait(%q): %v", spec.Command, err)
	}
	ending := w.Ending()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(stdout.Name())
	errOut, _ := os.ReadFile(stderr.Name())
	r := runResult{code: code, stdout: strings.TrimSpace(string(out)), stderr: strings.TrimSpace(string(errOut)), took: took, door: d, ending: ending}
	t.Logf("%q -> exit %d in %v; stdout %q; stderr %q", spec.Command, r.code, took.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

func TestWall(t *testing.T) {
	requireRoot(t)

	t.Run("transparent-v4", func(t *testing.T) {
		r := runWalled(t, []uint16{80, 443}, "curl", "-sS", "--max-time", "5", "http://192.0.2.1:443/")
		if r.code != 0 || r.stdout != "192.0.2.1:443" {
			t.Fatalf("curl through the wall: exit %d, body %q, stderr %q; want exit 0, body 192.0.2.1:443", r.code, r.stdout, r.stderr)
		}
		if dsts, _ := r.door.seen(); len(dsts) != 1 || dsts[0] != netip.MustParseAddrPort("192.0.2.1:443") {
			t.Fatalf("door saw original destinations %v, want [192.0.2.1:443]", dsts)
		}
	})

	t.Run("transparent-v6", func(t *testing.T) {
		r := runWalled(t, []uint16{443}, "curl", "-sS", "-g", "--max-time", "5", "http://[2001:db8::1]:443/")
		if r.code != 0 || r.stdout != "[2001:db8::1]:443" {
			t.Fatalf("curl over IPv6 through the wall: exit %d, body %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("dns-any-server", func(t *testing.T) {
		for _, args := range [][]string{
			{"@127.0.0.53", "allowed.example"},
			{"@192.0.2.53", "other.example"},
			{"@192.0.2.53", "+tcp", "tcp.example"},
			{"@2001:db8::53", "six.example"},
		} {
			argv := append([]string{"dig", "+short", "+time=2", "+tries=1"}, args...)
			r := runWalled(t, nil, argv...)
			if r.code != 0 || r.stdout != fakeIP {
				t.Errorf("%q: exit %d, answer %q; want the door's %s", argv, r.code, r.stdout, fakeIP)
			}
		}
		// The system resolver as configured in resolv.conf, whatever it names.
		r := runWalled(t, nil, "getent", "ahostsv4", "libc.example")
		if r.code != 0 || !strings.HasPrefix(r.stdout, fakeIP) {
			t.Errorf("getent through resolv.conf: exit %d, %q; want %s", r.code, r.stdout, fakeIP)
		}
		_, queries := r.door.seen()
		if len(queries) == 0 || !strings.Contains(strings.Join(queries, " "), "libc.example.") {
			t.Errorf("door saw queries %v, want libc.example.", queries)
		}
	})

	t.Run("listen-backlog", func(t *testing.T) {
		// The door's listeners are made without the net package, which
		// would read the backlog from /proc: each must still take the
		// namespace's somaxconn, and listen on both families' wildcard.
		r := runWalled(t, []uint16{443}, "sh", "-c", "cat /proc/sys/net/core/somaxconn; ss -ltnH")
		lines := strings.Split(r.stdout, "\n")
		if r.code != 0 || len(lines) != 3 {
			t.Fatalf("somaxconn and ss: exit %d, %q, stderr %q; want somaxconn and two listeners", r.code, r.stdout, r.stderr)
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 4 || f[0] != "LISTEN" || f[2] != lines[0] || !strings.HasPrefix(f[3], "*:") {
				t.Errorf("listener %q: want LISTEN with a backlog of %s (somaxconn) on *:PORT", l, lines[0])
			}
		}
	})

	t.Run("non-policy-port-reset", func(t *testing.T) {
		r := runWalled(t, []uint16{443}, "curl", "-sS", "--max-time", "5", "http://192.0.2.1:8080/")
		if r.code != 7 {
			t.Fatalf("curl to a port outside the policy: exit %d, stderr %q; want exit 7 (could not connect)", r.code, r.stderr)
		}
		if r.took > 2*time.Second {
			t.Fatalf("refusal took %v; a reset must be immediate", r.took)
		}
		for _, addr := range []string{"192.0.2.1:8080", "[2001:db8::1]:22", "10.1.2.3:443"} {
			ports := []uint16{443}
			if addr == "10.1.2.3:443" {
				ports = nil // 443 is not in this policy
			}
			r := runWalled(t, ports, testExe, testDialArg, "tcp", addr)
			if r.stdout != "refused" && r.stdout != "denied" {
				t.Errorf("TCP to %s outside the policy: %q, want an immediate refusal", addr, r.stdout)
			}
		}
	})

	t.Run("udp-other-port-refused", func(t *testing.T) {
		for _, addr := range []string{"192.0.2.1:9999", "[2001:db8::1]:123"} {
			r := runWalled(t, nil, testExe, testDialArg, "udp", addr)
			if r.stdout != "refused" && r.stdout != "denied" {
				t.Errorf("UDP to %s: %q, want an immediate refusal", addr, r.stdout)
			}
		}
	})

	t.Run("loopback-servers-work", func(t *testing.T) {
		r := runWalled(t, []uint16{8443}, "sh", "-c",
			`socat TCP-LISTEN:8443,bind=127.0.0.1,reuseaddr SYSTEM:'echo local-server' & sleep 0.3; socat -T2 - TCP:127.0.0.1:8443 </dev/null`)
		if r.stdout != "local-server" {
			t.Fatalf("a server of the run on 127.0.0.1:8443: got %q (stderr %q), want local-server", r.stdout, r.stderr)
		}
	})

	t.Run("no-capabilities", func(t *testing.T) {
		r := runWalled(t, nil, "grep", "-E", "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)", "/proc/self/status")
		for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("/proc/self/status inside lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("cannot-escape", func(t *testing.T) {
		for _, tc := range []struct {
			argv []string
			want string
		}{
			{[]string{"nft", "flush", "ruleset"}, "Operation not permitted"},
			{[]string{"ip", "link", "add", "pw0", "type", "dummy"}, "Operation not permitted"},
			{[]string{"ip", "route", "del", "default"}, "Operation not permitted"},
			{[]string{"nsenter", "--net=/proc/1/ns/net", "true"}, "nsenter: "},
			{[]string{"nsenter", "--net=/proc/self/ns/net", "true"}, "Operation not permitted"},
			{[]string{"kill", "-9", strconv.Itoa(os.Getpid())}, "No such process"},
			// The wall's init (pid 1 here) keeps capabilities (initCaps, in the
			// run's user namespace where it has one): the run, with none, may not
			// reach into it — not its descriptors (the door's listeners passed
			// through it), not its memory.
			{[]string{"ls", "-l", "/proc/1/fd/0"}, "Permission denied"},
			{[]string{"cat", "/proc/1/environ"}, "Permission denied"},
			{[]string{"cat", "/proc/1/mem"}, "Permission denied"},
		} {
			r := runWalled(t, []uint16{443}, tc.argv...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%q inside the wall: exit %d, stderr %q; want failure with %q", tc.argv, r.code, r.stderr, tc.want)
			}
		}
		// The rules are still there, as the host sees them.
		if os.Geteuid() == 0 {
			w, err := Raise(context.Background(), Spec{Command: []string{"sh", "-c", "nft flush ruleset; sleep 30"}, Ports: []uint16{443}, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			enter := []string{"-t", strconv.Itoa(w.Pid()), "-n"}
			if own, _ := os.Readlink("/proc/self/ns/user"); own != readlinkOr(fmt.Sprintf("/proc/%d/ns/user", w.Pid())) {
				enter = append(enter, "-U") // the init's own user namespace
			}
			out, err := exec.Command("nsenter", append(enter, "nft", "list", "ruleset")...).CombinedOutput()
			if err != nil {
				t.Fatalf("nsenter nft list ruleset: %v: %s", err, out)
			}
			tport := w.Listeners().Transparent.Addr().(*net.TCPAddr).Port
			if !strings.Contains(string(out), fmt.Sprintf("tcp dport 443 redirect to :%d", tport)) {
				t.Errorf("ruleset in the run's namespace lacks the redirect to :%d:\n%s", tport, out)
			}
		}
	})

	t.Run("private-tmp-and-run", func(t *testing.T) {
		hostFile, err := os.CreateTemp("/tmp", "postern-wall-host-*")
		if err != nil {
			t.Fatal(err)
		}
		hostFile.Close()
		defer os.Remove(hostFile.Name())
		sock := filepath.Join("/tmp", fmt.Sprintf("postern-wall-%d.sock", os.Getpid()))
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("host-socket\n"))
				c.Close()
			}
		}()
		script := fmt.Sprintf(`test -e %s && echo host-file-visible; `+
			`socat -T1 - UNIX-CONNECT:%s </dev/null 2>/dev/null; `+
			`echo run-entries=$(ls -A /run | wc -l); echo tmp-entries=$(ls -A /tmp); `+
			`test -e /proc/%d && echo host-pid-visible; echo end`, hostFile.Name(), sock, os.Getpid())
		wd := t.TempDir()
		r := runSpec(t, Spec{Command: []string{"sh", "-c", script}, Dir: wd}, nil)
		for _, bad := range []string{"host-file-visible", "host-socket", "host-pid-visible"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("the run reached the host's /tmp or processes: %q", r.stdout)
			}
		}
		// /tmp is empty but for the way to the run's own working directory.
		tmpWant := "tmp-entries="
		if strings.HasPrefix(wd, "/tmp/") {
			tmpWant += strings.Split(wd, "/")[2]
		}
		for _, want := range []string{"run-entries=0", tmpWant + "\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("inside the wall: %q, want %s", r.stdout, want)
			}
		}
	})

	t.Run("background-processes-die", func(t *testing.T) {
		var pidns string
		// The command waits for the namespace to be read: ended, the init
		// could be gone before.
		dir := t.TempDir()
		r := runSpec(t, Spec{Dir: dir, Command: []string{"sh", "-c", "sleep 1000 & sleep 1000 & while [ ! -e go ]; do sleep 0.01; done; echo started"}}, func(w *Wall) {
			pidns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", w.Pid()))
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Error(err)
			}
		})
		if r.code != 0 || r.stdout != "started" {
			t.Fatalf("exit %d, %q", r.code, r.stdout)
		}
		if pidns == "" {
			t.Fatal("could not read the run's pid namespace")
		}
		if left := processesIn("pid", pidns); len(left) > 0 {
			t.Fatalf("processes of the run's %s outlived it: %v", pidns, left)
		}
	})

	t.Run("exit-status", func(t *testing.T) {
		// A file the run sees and may not execute.
		dir := t.TempDir()
		noExec := filepath.Join(dir, "not-a-program")
		if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			argv   []string
			want   int
			stderr string // what stderr says, if anything is asked
		}{
			{[]string{"sh", "-c", "exit 3"}, 3, ""},
			{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
			{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
			{[]string{"no-such-command-postern"}, 127, `postern: command not found: "no-such-command-postern" in PATH=`},
			{[]string{noExec}, 126, "postern: exec " + noExec + ": permission denied"},
			{[]string{"true"}, 0, ""},
		} {
			r := runSpec(t, Spec{Command: tc.argv, Dir: dir}, nil)
			if r.code != tc.want || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.argv, r.code, r.stderr, tc.want, tc.stderr)
			}
		}
	})

	t.Run("bad-spec", func(t *testing.T) {
		if _, err := Raise(context.Background(), Spec{Command: []string{"true"}, Dir: "/nonexistent-postern"}); err == nil ||
			!strings.Contains(err.Error(), "/nonexistent-postern") {
			t.Errorf("Raise in a missing directory: %v, want an error naming it", err)
		}
		if _, err := Raise(context.Background(), Spec{Dir: t.TempDir()}); err == nil {
			t.Error("Raise of no command succeeded")
		}
		if _, err := Raise(context.Background(), Spec{Command: []string{"true"}, Ports: []uint16{0}, Dir: t.TempDir()}); !errors.Is(err, ErrBadRuleConfig) {
			t.Errorf("Raise with port 0: %v, want ErrBadRuleConfig", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Raise(ctx, Spec{Command: []string{"true"}, Dir: t.TempDir()}); !errors.Is(err, context.Canceled) {
			t.Errorf("Raise with a cancelled context: %v, want context.Canceled", err)
		}
	})

	t.Run("signal-forwarded", func(t *testing.T) {
		r := runSpec(t, Spec{Command: []string{"sh", "-c", "trap 'echo got-term; exit 42' TERM; echo ready; while :; do sleep 0.05; done"}}, func(w *Wall) {
			time.Sleep(300 * time.Millisecond)
			if err := w.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
		})
		if r.code != 42 || !strings.Contains(r.stdout, "got-term") {
			t.Fatalf("after Signal(SIGTERM): exit %d, %q; want the trap's exit 42", r.code, r.stdout)
		}
		r = runSpec(t, Spec{Command: []string{"sleep", "100"}}, func(w *Wall) {
			time.Sleep(100 * time.Millisecond)
			if err := w.Signal(syscall.SIGINT); err != nil {
				t.Error(err)
			}
		})
		if r.code != 128+2 {
			t.Fatalf("sleep after Signal(SIGINT): exit %d, want 130", r.code)
		}
	})

	t.Run("tty", func(t *testing.T) {
		master, slave := openPTY(t)
		spec := Spec{Command: []string{"sh", "-c", "exec </dev/null; echo on-ctty > /dev/tty"}, Stdin: slave, TTY: true}
		done := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(master, 64))
			done <- string(b)
		}()
		master.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := runSpec(t, spec, nil)
		slave.Close()
		if r.code != 0 {
			t.Fatalf("writing /dev/tty inside: exit %d, stderr %q (no controlling terminal?)", r.code, r.stderr)
		}
		if got := <-done; !strings.Contains(got, "on-ctty") {
			t.Fatalf("pty master read %q, want on-ctty", got)
		}
	})

	t.Run("terminal-name-size-resize-and-ctrl-c", func(t *testing.T) {
		master, slave := openPTY(t)
		if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 101}); err != nil {
			t.Fatal(err)
		}
		script := `tty; stty size; ls -A /dev/pts | tr '\n' ' '; echo; echo READY; i=0; ` +
			`while [ "$(stty size)" != "40 120" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; ` +
			`echo "now $(stty size)"; echo RESIZED; sleep 20; echo NOT-INTERRUPTED`
		var (
			mu  sync.Mutex
			buf strings.Builder
		)
		saw := func(s string) bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(buf.String(), s) }
		go func() {
			b := make([]byte, 1024)
			master.SetReadDeadline(time.Now().Add(30 * time.Second))
			for {
				n, err := master.Read(b)
				mu.Lock()
				buf.Write(b[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		spec := Spec{Command: []string{"sh", "-c", script}, Stdin: slave, Stdout: slave, Stderr: slave, TTY: true}
		r := runSpec(t, spec, func(w *Wall) {
			for _, step := range []struct {
				want string
				do   func()
			}{
				{"READY", func() {
					_ = unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120})
				}},
				{"RESIZED", func() { master.Write([]byte{0x03}) }},
			} {
				if !eventually(10*time.Second, func() bool { return saw(step.want) }) {
					t.Errorf("the run never printed %s", step.want)
					_ = w.Signal(syscall.SIGKILL)
					return
				}
				step.do()
			}
		})
		// The init passed all output on before it ended; this reader may lag.
		eventually(2*time.Second, func() bool { return saw("RESIZED") })
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		t.Logf("terminal:\n%s", out)
		// The run's terminal is its own, named in its own /dev/pts (pty 0 of
		// an instance holding nothing else), with the caller's size.
		for _, want := range []string{"/dev/pts/0\r\n33 101\r\n0 ptmx \r\n", "now 40 120"} {
			if !strings.Contains(out, want) {
				t.Errorf("terminal output lacks %q", want)
			}
		}
		if r.code != 128+2 || strings.Contains(out, "NOT-INTERRUPTED") {
			t.Errorf("Ctrl-C typed on the caller's terminal: exit %d, want %d", r.code, 128+2)
		}
	})

	t.Run("only-stdio-is-inherited", func(t *testing.T) {
		// A descriptor the caller left open without close-on-exec, here of a
		// host directory: its mount is the host's, writable past the seal.
		dir := t.TempDir()
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		const leaked = 77
		if err := unix.Dup3(fd, leaked, 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		defer unix.Close(leaked)
		// The command counts its descriptors without opening one: a shell
		// listing /proc/$$/fd would see its own pipes and saved redirections.
		r := runWalled(t, nil, testExe, testFdsArg)
		if r.stdout != "0 1 2" {
			t.Errorf("the command's descriptors: %q, want 0 1 2", r.stdout)
		}
		r = runWalled(t, nil, "sh", "-c", fmt.Sprintf(`touch /proc/$$/fd/%d/planted 2>/dev/null && echo PLANTED`, leaked))
		if strings.Contains(r.stdout, "PLANTED") {
			t.Errorf("the run wrote through inherited descriptor %d", leaked)
		}
		if _, err := os.Stat(filepath.Join(dir, "planted")); err == nil {
			t.Errorf("the run wrote into %s through an inherited descriptor", dir)
		}
	})

	t.Run("host-terminals-unreachable", func(t *testing.T) {
		// A terminal of the host's, as an operator's would be: as root the
		// run's uid owns it. The run must not see it, while ptys of its own work.
		master, _ := openPTY(t)
		n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		hostPTY := fmt.Sprintf("/dev/pts/%d", n)
		script := fmt.Sprintf(`echo "pts: $(ls -A /dev/pts | tr '\n' ' ')"; `+
			`if (exec 3<>%[1]s) 2>/dev/null; then echo OPENED-HOST-PTY; fi; `+
			`if (exec 3>/dev/tty) 2>/dev/null; then echo HAS-A-CONTROLLING-TERMINAL; fi; `+
			`script -qec tty /dev/null </dev/null; echo "script rc=$?"`, hostPTY)
		r := runSpec(t, Spec{Command: []string{"sh", "-c", script}, Stdin: nil}, nil)
		if !strings.Contains(r.stdout, "pts: ptmx \n") {
			t.Errorf("the run's /dev/pts holds more than its ptmx: %q", r.stdout)
		}
		for _, bad := range []string{"OPENED-HOST-PTY", "HAS-A-CONTROLLING-TERMINAL"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("inside the wall: %s (host pty %s)", bad, hostPTY)
			}
		}
		if !regexp.MustCompile(`(?m)^/dev/pts/0\r?$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "script rc=0") {
			t.Errorf("script(1) inside the wall did not get a terminal of the run's own: %q, stderr %q", r.stdout, r.stderr)
		}
	})
}

// eventually polls cond every 20ms until it holds or d has passed.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// processesIn lists host pids whose namespace of kind (pid, net) is ns.
func processesIn(kind, ns string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", kind)); err == nil && l == ns {
			out = append(out, e.Name())
		}
	}
	return out
}

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

func TestRaiseRefusesWithRemedy(t *testing.T) {
	requireRoot(t)
	if os.Getenv("POSTERN_TEST_NO_USERNS") == "1" {
		// Inside a user namespace whose user.max_user_namespaces is 0.
		if HoldsInitCaps() {
			// Its root holds the capabilities there: the wall needs no
			// user namespace of its own and is raised without one.
			r := runWalled(t, nil, "sh", "-c", "readlink /proc/self/ns/user")
			self, err := os.Readlink("/proc/self/ns/user")
			if err != nil {
				t.Fatal(err)
			}
			if r.code != 0 || r.stdout != self {
				t.Fatalf("the run where user namespaces are limited to 0: exit %d, user namespace %q, want 0 and this process's %q", r.code, r.stdout, self)
			}
			return
		}
		_, err := Raise(context.Background(), Spec{Command: []string{"true"}, Dir: t.TempDir()})
		var ke *KernelError
		if !errors.As(err, &ke) {
			t.Fatalf("Raise where user namespaces are limited to 0: %v, want *KernelError", err)
		}
		if ke.Step != StepUserns || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(ke.Remedy, "user.max_user_namespaces") {
			t.Fatalf("KernelError{Step: %q, Err: %v, Remedy: %q}; want step userns, ENOSPC, a remedy naming user.max_user_namespaces", ke.Step, ke.Err, ke.Remedy)
		}
		t.Logf("refusal reads: %v", err)
		return
	}
	testhosts.RerunWithoutUserns(t, "TestRaiseRefusesWithRemedy")
	if os.Geteuid() == 0 {
		// And as its root without a capability: a user namespace is needed,
		// and refused.
		testhosts.RerunWithoutUserns(t, "TestRaiseRefusesWithRemedy", testhosts.NoCaps...)
	}
}

// TestWallRootInitHasNoUsernsAndOnlyItsCaps: a caller holding the init's
// capabilities clones it with no user namespace of its own, and the init,
// every thread of it, holds initCaps and nothing more, in its bounding set
// too; the command holds nothing.
func TestWallRootInitHasNoUsernsAndOnlyItsCaps(t *testing.T) {
	requireRoot(t)
	if !HoldsInitCaps() {
		t.Fatal("root without the init's capabilities")
	}
	var want uint64
	for _, c := range initCaps {
		want |= 1 << c
	}
	r := runWalled(t, nil, "sh", "-c", `readlink /proc/self/ns/user; grep -h -E '^Cap(Eff|Prm|Bnd)' /proc/1/task/*/status | sort -u | tr '\n\t' '  '; echo; grep -h -E '^Cap(Eff|Bnd)' /proc/1/status; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; grep -h -E '^Cap(Inh|Amb)' /proc/1/status`)
	self, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(r.stdout, "\n")
	if r.code != 0 || len(lines) != 9 {
		t.Fatalf("exit %d, output %q", r.code, r.stdout)
	}
	if lines[0] != self {
		t.Errorf("the run's user namespace is %s, want this process's %s", lines[0], self)
	}
	// Every thread's three sets hold initCaps, or nothing: the thread that
	// started the command, which gave up everything, may not have ended
	// yet when the command reads them.
	threads := strings.Fields(lines[1])
	if len(threads) < 6 || len(threads)%2 != 0 {
		t.Fatalf("the init's threads' capabilities: %q", lines[1])
	}
	for i := 1; i < len(threads); i += 2 {
		got, err := strconv.ParseUint(threads[i], 16, 64)
		if err != nil || (got != want && got != 0) {
			t.Errorf("a thread of the init holds %s %s, want %016x (initCaps) or none", threads[i-1], threads[i], want)
		}
	}
	for _, l := range lines[2:4] {
		f := strings.Fields(l)
		got, err := strconv.ParseUint(f[len(f)-1], 16, 64)
		if err != nil || got != want {
			t.Errorf("the init's %s, want %016x (initCaps)", l, want)
		}
	}
	for i, l := range lines[4:] {
		if f := strings.Fields(l); f[len(f)-1] != "0000000000000000" {
			whose := "the command's"
			if i >= 3 {
				whose = "the init's"
			}
			t.Errorf("%s %s, want none", whose, l)
		}
	}
	if os.Getenv("POSTERN_TEST_INHERITABLE") == "" {
		// Again with capabilities beyond initCaps inheritable here, which
		// root's exec would otherwise add to the init's.
		cmd := exec.Command("setpriv", "--inh-caps=+sys_module,+sys_ptrace,+sys_rawio", "--",
			os.Args[0], "-test.run", "^TestWallRootInitHasNoUsernsAndOnlyItsCaps$", "-test.v")
		cmd.Env = append(os.Environ(), "POSTERN_TEST_INHERITABLE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWallRootInitHasNoUsernsAndOnlyItsCaps") {
			t.Fatalf("with inheritable capabilities: %v\n%s", err, out)
		}
	}
}

func TestWallUnprivileged(t *testing.T) {
	testhosts.Kernel(t)
	if os.Getenv(asUserEnv) == "1" {
		t.Skip("already the unprivileged run")
	}
	if os.Geteuid() != 0 {
		// Not root: TestWall itself is the unprivileged run when userns allows it.
		requireRoot(t)
	}
	testhosts.RerunAsNobody(t, "^(TestWall|TestWallFiles|TestWallSubmodulesObeyNothing|TestRaiseRefusesWithRemedy|TestWallRefusalsRecorded|TestWallMasksKernelFiles)$", "TestWall", "TestWallFiles", "TestWallSubmodulesObeyNothing", "TestRaiseRefusesWithRemedy", "TestWallRefusalsRecorded", "TestWallMasksKernelFiles")
}

// readlinkOr is p's link, or "" where it cannot be read.
func readlinkOr(p string) string {
	l, _ := os.Readlink(p)
	return l
}

// plantHostKey adds a key described prefix+pid to this user's keyring on the
// host, for the test's length, and returns its description.
func plantHostKey(t *testing.T, prefix string) string {
	t.Helper()
	desc := prefix + strconv.Itoa(os.Getpid())
	id, err := unix.AddKey("user", desc, []byte("host secret"), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Fatalf("add a key to the host's user keyring: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0) })
	return desc
}

// TestWallRunReachesNoKeyring: the kernel's keyrings are not divided by
// namespace; a key put in this user's keyring on the host is not there for
// the run, whose every keyring call answers ENOSYS.
func TestWallRunReachesNoKeyring(t *testing.T) {
	requireRoot(t)
	desc := plantHostKey(t, "postern-test-")
	// keyctl(KEYCTL_SEARCH, the user keyring, "user", desc), request_key,
	// add_key: each one's errno.
	script := fmt.Sprintf(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = [(%d, 10, -4, b"user", %q.encode(), 0), (%d, b"user", %q.encode(), None, 0), (%d, b"user", b"x", b"y", 1, -4)]
for c in calls:
    r = libc.syscall(*c)
    print(r, os.strerror(ctypes.get_errno()) if r < 0 else "answered")
`, unix.SYS_KEYCTL, desc, unix.SYS_REQUEST_KEY, desc, unix.SYS_ADD_KEY)
	r := runWalled(t, nil, "python3", "-c", script)
	want := strings.Repeat("-1 Function not implemented\n", 3)
	if r.code != 0 || r.stdout+"\n" != want {
		t.Fatalf("keyring calls inside the run: exit %d, %q; want each refused:\n%s", r.code, r.stdout, want)
	}
}

// TestWallMasksKernelFiles: the kernel files no namespace divides (every
// user's keys, the host's timers, its firmware tables) are empty inside the
// run, and the run cannot take a mask away. A key is planted on the host
// first, so that the host's /proc/keys is known to list something.
func TestWallMasksKernelFiles(t *testing.T) {
	requireRoot(t)
	desc := plantHostKey(t, "postern-test-mask-")
	if host, err := os.ReadFile("/proc/keys"); err != nil || !strings.Contains(string(host), desc) {
		t.Fatalf("the host's /proc/keys does not list the planted key %q (err %v)", desc, err)
	}
	var present []string
	for _, p := range kernelMasks() {
		if _, err := os.Stat(p); err == nil {
			present = append(present, p)
		}
	}
	for _, must := range []string{"/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/interrupts"} {
		if !slices.Contains(present, must) {
			t.Fatalf("%s is not on this host: the test cannot show its mask", must)
		}
	}
	// For each path: its size in bytes read (a file) or its entries (a
	// directory); then an unmount of each, which must be refused.
	script := `import os, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
for p in sys.argv[1:]:
    if os.path.isdir(p):
        print(p, "entries", len(os.listdir(p)))
    else:
        with open(p, "rb") as f:
            print(p, "bytes", len(f.read()))
for p in sys.argv[1:]:
    r = libc.umount2(p.encode(), 2)
    print(p, "umount", r, os.strerror(ctypes.get_errno()) if r < 0 else "done")
for p in sys.argv[1:]:
    if not os.path.isdir(p):
        with open(p, "rb") as f:
            print(p, "after", len(f.read()))
`
	r := runWalled(t, nil, append([]string{"python3", "-c", script}, present...)...)
	if r.code != 0 {
		t.Fatalf("reading the kernel's files inside the run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var want strings.Builder
	for _, p := range present {
		kind := "bytes"
		if st, _ := os.Stat(p); st.IsDir() {
			kind = "entries"
		}
		fmt.Fprintf(&want, "%s %s 0\n", p, kind)
	}
	for _, p := range present {
		fmt.Fprintf(&want, "%s umount -1 Operation not permitted\n", p)
	}
	for _, p := range present {
		if st, _ := os.Stat(p); !st.IsDir() {
			fmt.Fprintf(&want, "%s after 0\n", p)
		}
	}
	if r.stdout+"\n" != want.String() {
		t.Fatalf("the kernel's files inside the run:\n%s\nwant each empty and each mask kept:\n%s", r.stdout, want.String())
	}

	// From a user namespace of the run's own, where it holds every
	// capability over a mount namespace of its own: the masks are locked
	// there (an unmount is refused), a fresh proc or sysfs would reveal
	// what they cover (refused), a bind of /proc alone would leave them
	// behind (refused) and a recursive one carries them.
	nested := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def err(r): return "ok" if r == 0 else os.strerror(ctypes.get_errno())
def say(*a): print(*a, flush=True)
r = libc.unshare(0x10000000 | 0x00020000 | 0x20000000)
say("unshare", err(r))
if r == 0:
    for p in ["/proc/keys", "/proc/interrupts"]:
        say("umount", p, err(libc.umount2(p.encode(), 2)))
    os.makedirs("/tmp/p", exist_ok=True)
    if os.fork() == 0:
        say("proc", err(libc.mount(b"proc", b"/tmp/p", b"proc", 0, None)))
        say("sysfs", err(libc.mount(b"sysfs", b"/tmp/p", b"sysfs", 0, None)))
        say("bind", err(libc.mount(b"/proc", b"/tmp/p", None, 4096, None)))
        say("rbind", err(libc.mount(b"/proc", b"/tmp/p", None, 4096 | 16384, None)))
        say("keys", len(open("/tmp/p/keys").read()))
        os._exit(0)
    os.wait()
`
	r = runWalled(t, nil, "python3", "-c", nested)
	if r.stdout == "unshare Operation not permitted" || r.stdout == "unshare No space left on device" {
		t.Logf("no user namespace inside the run here (%s): nothing to unlock the masks with", r.stdout)
		return
	}
	wantNested := "unshare ok\numount /proc/keys Invalid argument\numount /proc/interrupts Invalid argument\n" +
		"proc Operation not permitted\nsysfs Operation not permitted\nbind Invalid argument\nrbind ok\nkeys 0"
	if r.code != 0 || r.stdout != wantNested {
		t.Fatalf("undoing the masks from a user namespace inside the run: exit %d\n%s\n%s\nwant:\n%s", r.code, r.stdout, r.stderr, wantNested)
	}
}
