//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/internal/wallimage"
)

// posternBin is the binary built once for every end-to-end test of the package.
var posternBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		// The pure tier alone: no binary is built, and every end-to-end
		// test skips (testhosts.EndToEnd).
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "postern-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	posternBin = filepath.Join(dir, "postern")
	if err := buildAttached(posternBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// smallPid1 says whether the built binary carries the wall's small pid 1
// (a C compiler was there to build it).
var smallPid1 bool

// buildAttached builds postern at bin as make does: without cgo, with the
// wall's init attached (internal/wallimage).
func buildAttached(bin string, args ...string) error {
	for _, b := range []struct{ out, pkg string }{{bin, "."}, {bin + "-wall", "../postern-wall"}} {
		a := []string{"build", "-o", b.out}
		if b.pkg != "." {
			a = append(a, "-tags", "postern_wallinit")
		} else {
			a = append(a, args...)
		}
		build := exec.Command("go", append(a, b.pkg)...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build %s: %w", b.pkg, err)
		}
	}
	defer os.Remove(bin + "-wall")
	// The small pid 1, attached to the init's image as make attaches it.
	switch err := testhosts.BuildPid1(bin + "-pid1"); {
	case errors.Is(err, testhosts.ErrNoCC):
		fmt.Fprintln(os.Stderr, "e2e: the walls start the Go init:", err)
	case err != nil:
		return err
	default:
		smallPid1 = true
		defer os.Remove(bin + "-pid1")
		if err := wallimage.Attach(bin+"-wall", bin+"-pid1"); err != nil {
			return err
		}
	}
	return wallimage.Attach(bin, bin+"-wall")
}

// runPostern runs the built binary to completion and returns its stdout,
// stderr and exit code.
func runPostern(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	testhosts.EndToEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binFor(t), args...)
	cmd.Env = append(os.Environ(), "POSTERN_HOME="+t.TempDir())
	return runToEnd(t, cmd)
}

// writeFile writes content to a new file in t's temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// doorProc is a running `postern door`.
type doorProc struct {
	Addr   string // host:port the proxy listens on
	Policy string // the policy file

	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	events []door.Event
	bad    []string // stdout lines that were not events
	stderr bytes.Buffer
	cond   *sync.Cond
}

var listeningRE = regexp.MustCompile(`door listening.* addr=(\S+)`)

// startDoor writes policyText to a file and runs `postern door --policy FILE
// --listen LISTEN ARGS...` until the test ends. listen "" means
// 127.0.0.1:0; the bound address is read from the door's log. Callers pass
// --resolver (a lab DNS server) so the door never asks the system resolver.
func startDoor(t *testing.T, policyText, listen string, args ...string) *doorProc {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if !containsFlag(args, "--resolver") {
		t.Fatal("startDoor: pass --resolver (a test DNS server); the door must never use the system resolver in tests")
	}
	d := &doorProc{Policy: writeFile(t, "policy.hcl", policyText), done: make(chan struct{})}
	d.cond = sync.NewCond(&d.mu)
	d.cmd = exec.Command(binFor(t), append([]string{"door", "--policy", d.Policy, "--listen", listen}, args...)...)
	d.cmd.Env = append(os.Environ(), "POSTERN_HOME="+t.TempDir())
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev door.Event
			d.mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Event == "" {
				d.bad = append(d.bad, sc.Text())
			} else {
				d.events = append(d.events, ev)
			}
			d.cond.Broadcast()
			d.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			d.mu.Lock()
			d.stderr.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addrc <- strings.Trim(m[1], `"`)
				sent = true
			}
		}
	}()
	go func() {
		readers.Wait()
		d.cmd.Wait()
		d.mu.Lock()
		close(d.done)
		d.cond.Broadcast()
		d.mu.Unlock()
	}()
	t.Cleanup(func() { d.stop(t) })

	select {
	case d.Addr = <-addrc:
	case <-d.done:
		t.Fatalf("postern door exited before listening:\n%s", d.Stderr())
	case <-time.After(10 * time.Second):
		t.Fatalf("postern door did not say where it listens within 10s:\n%s", d.Stderr())
	}
	return d
}

func containsFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// stop sends SIGTERM, then SIGKILL if the door does not end within 5s, and
// checks that every stdout line was an event.
func (d *doorProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-d.done:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			t.Errorf("postern door ignored SIGTERM for 5s; killing it")
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.bad) > 0 {
		t.Errorf("postern door printed non-event lines on stdout: %q", d.bad)
	}
	if t.Failed() {
		t.Logf("door stderr:\n%s", d.stderr.String())
		for _, ev := range d.events {
			t.Logf("event: %+v", ev)
		}
	}
}

// Stderr returns what the door logged so far.
func (d *doorProc) Stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// Events returns the events so far.
func (d *doorProc) Events() []door.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]door.Event(nil), d.events...)
}

// waitEvent waits up to 5s for an event match accepts, and returns it.
func (d *doorProc) waitEvent(t *testing.T, what string, match func(door.Event) bool) door.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	timer := time.AfterFunc(5*time.Second, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer timer.Stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		for _, ev := range d.events {
			if match(ev) {
				return ev
			}
		}
		select {
		case <-d.done:
			t.Fatalf("door exited without an event for %s; events: %+v\nstderr:\n%s", what, d.events, d.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event for %s within 5s; events: %+v", what, d.events)
		}
		d.cond.Wait()
	}
}

// decision waits for the decision event about host:port.
func (d *doorProc) decision(t *testing.T, host string, port uint16) door.Event {
	t.Helper()
	return d.waitEvent(t, fmt.Sprintf("decision on %s:%d", host, port), func(ev door.Event) bool {
		return ev.Event == "decision" && ev.Host == host && ev.Port == port
	})
}

// end waits for the end event of connection id.
func (d *doorProc) end(t *testing.T, conn uint64) door.Event {
	t.Helper()
	return d.waitEvent(t, fmt.Sprintf("end of conn %d", conn), func(ev door.Event) bool {
		return ev.Event == "end" && ev.Conn == conn
	})
}

// curlResult is what curl reported.
type curlResult struct {
	Code    int    // curl's exit status
	HTTP    int    // %{http_code}
	Connect int    // %{http_connect}: the proxy's answer to CONNECT
	Body    string // response body
	Stderr  string
}

// curl runs curl with args plus a write-out that reports the status codes.
// It never consults a proxy from the environment or the system resolver for a
// name the test did not pin: tests pass --proxy and use --resolve or names the
// door resolves.
func curl(t *testing.T, args ...string) curlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const sep = "\n--curl-write-out--"
	full := append([]string{"-sS", "--max-time", "10", "-w", sep + "%{http_code} %{http_connect}"}, args...)
	cmd := exec.CommandContext(ctx, "curl", full...)
	cmd.Env = curlEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := curlResult{Stderr: e.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	body, tail, ok := strings.Cut(o.String(), sep)
	if !ok {
		t.Fatalf("curl %v: no write-out in %q (stderr %q)", args, o.String(), e.String())
	}
	r.Body = body
	fmt.Sscanf(tail, "%d %d", &r.HTTP, &r.Connect)
	return r
}

// curlEnv is the environment without any proxy settings.
func curlEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// rawResponse is a proxy's answer to a request written byte for byte.
type rawResponse struct {
	Status int
	Header http.Header
	Body   string
}

// rawRequest sends head (CRLF line ends added) to the proxy at addr exactly as
// written, so spellings no client library would produce reach the door, and
// reads one response.
func rawRequest(t *testing.T, addr string, lines ...string) rawResponse {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, strings.Join(lines, "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(lines[0], " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response to %q: %v", lines[0], err)
	}
	defer resp.Body.Close()
	var body []byte
	if !(method == http.MethodConnect && resp.StatusCode == 200) {
		body, _ = io.ReadAll(resp.Body)
	}
	return rawResponse{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// e2eLab is a lab with the hosts most door tests need:
//   - web: HTTP on 80 and HTTPS on 443 for every name in webNames, in a /24
//     the tests' policies list in allow_cidrs;
//   - other: the same servers in a second /24 no policy lists;
//   - dns: a recording DNS server answering webNames with web's address and
//     otherNames with other's; every other name gets NXDOMAIN.
type e2eLab struct {
	*testhosts.Lab
	Web, Other, NS *testhosts.Host
	DNS            *testhosts.RecordingDNS
}

var (
	webNames   = []string{"web.test", "api.web.test", "secret.web.test", "leak.test", "other.test"}
	otherNames = []string{"inside.test", "sneaky.test"}
)

func newE2ELab(t *testing.T) *e2eLab {
	t.Helper()
	lab := testhosts.NewTestLab(t, "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := &e2eLab{Lab: lab}
	for _, hp := range []struct {
		h    **testhosts.Host
		name string
	}{{&l.Web, "web"}, {&l.Other, "other"}, {&l.NS, "ns"}} {
		h, err := lab.Host(ctx, hp.name)
		if err != nil {
			t.Fatal(err)
		}
		*hp.h = h
	}
	for _, h := range []*testhosts.Host{l.Web, l.Other} {
		if _, err := h.ServeHTTP(80, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ServeHTTPS(443, nil, append(append([]string{}, webNames...), otherNames...)...); err != nil {
			t.Fatal(err)
		}
	}
	answers := map[string][]netip.Addr{}
	for _, n := range webNames {
		answers[n] = []netip.Addr{l.Web.Addr}
	}
	for _, n := range otherNames {
		answers[n] = []netip.Addr{l.Other.Addr}
	}
	var err error
	l.DNS, err = l.NS.ServeDNS(53, answers)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Resolver is the --resolver flag pointing at the lab's DNS server.
func (l *e2eLab) Resolver() string { return "--resolver=" + l.DNS.Addr.String() }

// Pin is an --add-host flag pinning name to a.
func Pin(name string, a netip.Addr) string { return "--add-host=" + name + ":" + a.String() }

// echo decodes a test host's reply.
func echo(t *testing.T, body string) testhosts.EchoReply {
	t.Helper()
	var r testhosts.EchoReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("not a test host's reply: %q: %v", body, err)
	}
	return r
}

// openPTY opens a pseudo-terminal of rows x cols; both sides are closed when the
// test ends.
func openPTY(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// binFor is the built binary for t, an end-to-end test: under -short, none
// is built and t skips.
func binFor(t testing.TB) string {
	t.Helper()
	testhosts.EndToEnd(t)
	return posternBin
}
