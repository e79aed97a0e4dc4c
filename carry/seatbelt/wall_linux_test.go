package seatbelt

// These tests run the launcher's side of the carry on Linux: the door's
// listener and the hold on [::1], the run's environment and temporary
// directory, postern's last step, signals, the process group, exit status.
// Linux has no sandbox-exec: a shell stands in for it and starts the command
// without any profile, so nothing here shows that macOS enforces the profile.
// The tests that do are in wall_darwin_test.go and need a Mac.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/testhosts"
)

func TestWallRunsTheCommand(t *testing.T) {
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { out.ReadFrom(pr); close(done) }()
	home := t.TempDir()
	w, profileFile := raise(t, Spec{
		Run:     "r1",
		Command: []string{"sh", "-c", `echo "$HTTPS_PROXY|$TMPDIR|$GIT_CONFIG_VALUE_0|$(pwd)"; exit 3`},
		Dir:     home,
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=" + home, "https_proxy=http://elsewhere:1"},
		Policy:  policy.Nothing(),
		Stdout:  pw, Stderr: pw,
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, err := w.Wait()
	pw.Close()
	<-done
	if err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v; want 3", code, err)
	}
	url := ProxyURL(w.Port())
	want := url + "|" + w.TempDir() + "|" + url + "|" + home
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("the command saw %q, want %q", got, want)
	}
	if !strings.HasPrefix(filepath.Base(w.TempDir()), "postern-run-") {
		t.Errorf("temporary directory %s", w.TempDir())
	}
	prof, err := os.ReadFile(profileFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(prof) != w.Profile() || !strings.Contains(string(prof), `(remote ip "localhost:`+strconv.Itoa(int(w.Port()))+`")`) {
		t.Fatalf("the launcher was given another profile:\n%s", prof)
	}
	tmp := w.TempDir()
	w.Close()
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's temporary directory outlived the wall: %v", err)
	}
}

func TestWallHoldsLoopback6(t *testing.T) {
	w, _ := raise(t, Spec{Command: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}})
	if w.hold6 < 0 {
		t.Skip("this host has no [::1]")
	}
	port := strconv.Itoa(int(w.Port()))
	if l, err := net.Listen("tcp6", "[::1]:"+port); err == nil {
		l.Close()
		t.Fatalf("another program could listen on [::1]:%s beside the door", port)
	}
	// Held, not listening: a connection there is refused at once.
	if c, err := net.DialTimeout("tcp6", "[::1]:"+port, time.Second); err == nil {
		c.Close()
		t.Fatalf("a connection to [::1]:%s was accepted", port)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial [::1]:%s: %v, want connection refused", port, err)
	}
	w.Close()
	l, err := net.Listen("tcp6", "[::1]:"+port)
	if err != nil {
		t.Fatalf("[::1]:%s is still held after Close: %v", port, err)
	}
	l.Close()
}

func TestWallSignalsAndKillsItsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	w, _ := raise(t, Spec{
		// The shell leaves a sleeper behind in its process group.
		Command: []string{"sh", "-c", `sleep 300 & echo $! > ` + pidFile + `; wait`},
		Env:     []string{"PATH=/usr/bin:/bin"},
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(10 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("the command did not start its sleeper")
	}
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := w.Wait()
	if err != nil || code != 128+int(syscall.SIGTERM) {
		t.Fatalf("Wait = %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
	}
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		// A zombie until its reaper (init) collects it.
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d the run left running outlived it", pid)
}

func TestWallLauncherRefusal(t *testing.T) {
	w, err := Raise(context.Background(), Spec{
		Command:  []string{"true"},
		Env:      []string{"PATH=/usr/bin:/bin"},
		Launcher: []string{"/bin/sh", "-c", `echo "sandbox-exec: syntax error" >&2; exit 65`, "sandbox-exec"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Start(context.Background())
	var pe *ProfileError
	if !errors.As(err, &pe) || pe.Code != 65 {
		t.Fatalf("Start = %v, want a *ProfileError with exit status 65", err)
	}
	if _, err := Raise(context.Background(), Spec{Command: []string{"true"}, Launcher: []string{"/no/sandbox-exec"}}); !errors.As(err, &pe) || !strings.Contains(err.Error(), "ships with macOS") {
		t.Fatalf("no launcher: %v", err)
	}
	if _, err := Raise(context.Background(), Spec{Command: []string{"no-such-command-xyz"}, Env: []string{"PATH=/usr/bin:/bin"}, Launcher: standIn("/dev/null")}); !errors.Is(err, ErrCommandNotFound) {
		t.Fatalf("missing command: %v", err)
	}
}

// pyTLSServer is Python's http.server behind Python's ssl module.
const pyTLSServer = `import functools, http.server, ssl, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])
s = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), h)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain(sys.argv[4], sys.argv[5])
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
`

// selfSigned writes a certificate for name, its own authority, and its key.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestWallDoorCarriesTheRun runs curl as the command, with nothing but the
// environment Raise gave it to find the door, against Python's http.server
// (over TLS, through a CONNECT tunnel) on a test host: what arrives through
// the door is what a direct fetch gives, and a host the policy does not name
// is refused and recorded. Plain-HTTP bodies are not compared here: the
// door's HTTP forwarding corrupts them (issue 9), whatever carries the run.
func TestWallDoorCarriesTheRun(t *testing.T) {
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is the real client and server of this test: %v", tool, err)
		}
	}
	lab := testhosts.NewTestLab(t, "sbelt")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	web, err := lab.Host(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	site, keys := t.TempDir(), t.TempDir()
	blob := make([]byte, 3<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(site, "blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := selfSigned(t, keys, "web.test")
	l, err := web.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // the server binds it itself
	srv := web.Command(ctx, "python3", "-c", pyTLSServer, web.Addr.String(), strconv.Itoa(port), site, certFile, keyFile)
	srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-srv.Process.Pid, syscall.SIGKILL); srv.Wait() }()
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", web.Addr, port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if i == 100 {
			t.Fatalf("the server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := fmt.Sprintf("https://web.test:%d/blob", port)
	resolve := fmt.Sprintf("web.test:%d:%s", port, web.Addr)
	want, err := exec.CommandContext(ctx, "curl", "-sS", "--noproxy", "*", "--cacert", certFile, "--resolve", resolve, url).Output()
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(want) != sha256.Sum256(blob) {
		t.Fatal("the direct fetch is not the file")
	}

	pol, err := policy.Parse("t.hcl", []byte(fmt.Sprintf("ports = [%d]\nallow = [\"web.test\"]\nallow_cidrs = [%q]\n", port, lab.Subnet())))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	script := fmt.Sprintf(`curl -sS --cacert %s -o fetched %s && curl -s -o /dev/null -w '%%{http_code}' http://denied.test:%d/ > denied; true`, certFile, url, port)
	w, _ := raise(t, Spec{Run: "r2", Command: []string{"sh", "-c", script}, Dir: work, Policy: pol,
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + work}, Stderr: os.Stderr})

	var mu sync.Mutex
	var events []event.Event
	d, err := door.New(door.Config{Policy: pol, Run: "r2",
		AddHosts: map[string][]netip.Addr{"web.test": {web.Addr}, "denied.test": {web.Addr}},
		Emit:     func(e event.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	doorDone := make(chan error, 1)
	go func() { doorDone <- d.Run(dctx, w.Listeners()) }()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, err := w.Wait()
	stop()
	if derr := <-doorDone; derr != nil {
		t.Errorf("door: %v", derr)
	}
	if err != nil || code != 0 {
		t.Fatalf("run = %d, %v", code, err)
	}
	got, err := os.ReadFile(filepath.Join(work, "fetched"))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := sha256.Sum256(got), sha256.Sum256(want); g != w {
		t.Errorf("sha256 %s (%d bytes) through the door, %s (%d bytes) direct", hex.EncodeToString(g[:]), len(got), hex.EncodeToString(w[:]), len(want))
	}
	if b, _ := os.ReadFile(filepath.Join(work, "denied")); string(b) != "403" {
		t.Errorf("a host the policy does not name: HTTP %q, want 403", b)
	}
	mu.Lock()
	defer mu.Unlock()
	var allowed, denied bool
	for _, e := range events {
		if e.Event == "decision" && e.Kind == "connect" && e.Host == "web.test" && e.Decision == "allow" {
			allowed = true
		}
		if e.Event == "decision" && e.Host == "denied.test" && e.Decision == "deny" {
			denied = true
		}
	}
	if !allowed || !denied {
		t.Errorf("events: web.test CONNECT allowed %v, denied.test denied %v; all: %+v", allowed, denied, events)
	}
}

// A launcher that hangs before postern's last step: Start gives up when its
// context ends, and ends the launcher rather than leave it behind.
func TestWallStartBoundedByContext(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	w, err := Raise(context.Background(), Spec{
		Command:  []string{"true"},
		Env:      []string{"PATH=/usr/bin:/bin"},
		Launcher: []string{"/bin/sh", "-c", `echo $$ > ` + pidFile + `; exec sleep 300`, "sandbox-exec"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	err = w.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want it to give up at its deadline", err)
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("Start took %s after a deadline of 300ms", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the launcher (pid %d) is still there after Start gave up: %v", pid, err)
	}
}

// Close while Start waits for the launcher: both return, and the launcher
// is gone.
func TestWallCloseDuringStart(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	w, err := Raise(context.Background(), Spec{
		Command:  []string{"true"},
		Env:      []string{"PATH=/usr/bin:/bin"},
		Launcher: []string{"/bin/sh", "-c", `echo $$ > ` + pidFile + `; exec sleep 300`, "sandbox-exec"},
	})
	if err != nil {
		t.Fatal(err)
	}
	startErr := make(chan error, 1)
	go func() { startErr <- w.Start(context.Background()) }()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the launcher did not start")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a start under way")
	}
	select {
	case err := <-startErr:
		if err == nil {
			t.Fatal("Start succeeded on a wall closed under it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after Close")
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the launcher (pid %d) outlived the wall", pid)
		}
	}
}
