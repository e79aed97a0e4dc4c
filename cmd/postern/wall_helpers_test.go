//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// The wall's end-to-end tests attempt every way out from inside a run of the
// built binary and check both what the client saw and what postern recorded.
// Test hosts record what reaches them (HTTP requests, datagrams, ICMP echo
// requests, DNS queries), so "nothing arrived" is observed, not assumed.

// randHex returns n random bytes as hex, for names and paths no other test uses.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// binDir is the directory the e2e binary was built in; TestMain removes it.
func binDir() string { return filepath.Dir(posternBin) }

var (
	probeOnce sync.Once
	probeTmpl string // a POSTERN_HOME where local was measured
	probeErr  error

	wallprobeOnce sync.Once
	wallprobeBin  string
	wallprobeErr  error
)

// measuredHome returns a fresh POSTERN_HOME holding a record of local measured
// by 'postern machine probe-confinement'. The machine is measured once per
// test binary; each caller gets its own copy of that store, so its runs are
// its own.
func measuredHome(t *testing.T) string {
	t.Helper()
	testhosts.EndToEnd(t)
	probeOnce.Do(func() {
		probeTmpl = filepath.Join(binDir(), "measured-home")
		if probeErr = os.MkdirAll(probeTmpl, 0o700); probeErr != nil {
			return
		}
		cmd := exec.Command(binFor(t), "machine", "probe-confinement", "--json")
		cmd.Env = append(curlEnv(), "POSTERN_HOME="+probeTmpl)
		out, err := cmd.CombinedOutput()
		if err != nil {
			probeErr = fmt.Errorf("postern machine probe-confinement: %v\n%s", err, out)
			return
		}
		var v struct {
			Carry string `json:"carry"`
		}
		if err := json.Unmarshal(out, &v); err != nil || v.Carry != "network-wall" {
			probeErr = fmt.Errorf("probe-confinement measured carry %q, want network-wall (err %v):\n%s", v.Carry, err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return homeCopy(t, probeTmpl)
}

// wallprobe builds testdata/wallprobe once and returns its path.
func wallprobe(t *testing.T) string {
	t.Helper()
	wallprobeOnce.Do(func() {
		wallprobeBin = filepath.Join(binDir(), "wallprobe")
		out, err := exec.Command("go", "build", "-o", wallprobeBin, "./testdata/wallprobe/main.go").CombinedOutput()
		if err != nil {
			wallprobeErr = fmt.Errorf("build wallprobe: %v\n%s", err, out)
		}
	})
	if wallprobeErr != nil {
		t.Fatal(wallprobeErr)
	}
	return wallprobeBin
}

// workDir makes a run's working directory holding the files the run needs
// (the wall hides the host's /tmp, but keeps the working directory visible).
// files maps a name in the directory to the file to copy there.
func workDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		// The files are often programs the run executes: copied by another
		// process, so that no descriptor written here leaks into a child
		// forked meanwhile (ETXTBSY).
		if err := testhosts.CopyExecutable(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// poster runs the built binary with a given POSTERN_HOME, working directory and
// (optionally) credentials.
type poster struct {
	Home string
	Dir  string
	Bin  string              // default posternBin
	Cred *syscall.Credential // nil: as the test
	Env  []string            // extra variables; the base is the test's environment without proxies
}

func (p poster) command(ctx context.Context, args ...string) *exec.Cmd {
	bin := p.Bin
	if bin == "" {
		bin = posternBin
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = p.Dir
	cmd.Env = append(append(curlEnv(), p.Env...), "POSTERN_HOME="+p.Home)
	if p.Cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.Cred}
	}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// result is what one postern invocation did.
type result struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

// exec runs postern to completion (at most 60s).
func (p poster) exec(t *testing.T, args ...string) result {
	t.Helper()
	testhosts.EndToEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := p.command(ctx, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err := cmd.Run()
	r := result{Stdout: o.String(), Stderr: e.String(), Took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("postern %q: %v (ctx %v)\nstdout:\n%s\nstderr:\n%s", args, err, ctx.Err(), r.Stdout, r.Stderr)
	}
	return r
}

// runs lists the home's runs, oldest first.
func (p poster) runs(t *testing.T) []records.Run {
	t.Helper()
	r := p.exec(t, "runs", "list", "--json")
	if r.Code != 0 {
		t.Fatalf("postern runs list --json: exit %d\n%s", r.Code, r.Stderr)
	}
	var rs []records.Run
	if err := json.Unmarshal([]byte(r.Stdout), &rs); err != nil {
		t.Fatalf("runs list --json: %v\n%s", err, r.Stdout)
	}
	return rs
}

// lastRun is the newest run of the home.
func (p poster) lastRun(t *testing.T) records.Run {
	t.Helper()
	rs := p.runs(t)
	if len(rs) == 0 {
		t.Fatal("runs list --json: no run recorded")
	}
	return rs[len(rs)-1]
}

// events are a run's events as 'postern runs events ID --json' prints them.
func (p poster) events(t *testing.T, id string) events {
	t.Helper()
	r := p.exec(t, "runs", "events", id, "--json")
	if r.Code != 0 {
		t.Fatalf("postern runs events %s --json: exit %d\n%s", id, r.Code, r.Stderr)
	}
	return parseEvents(t, r.Stdout)
}

func parseEvents(t *testing.T, out string) events {
	t.Helper()
	var evs events
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var ev door.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// walled is one finished run: what the client printed and what was recorded.
type walled struct {
	result
	Run    records.Run
	Events events
	out    map[string]string
}

// run runs 'postern run [flags] -- sh -c script' and reads back the run's
// record and events.
func (p poster) run(t *testing.T, flags []string, script string) walled {
	t.Helper()
	args := append(append([]string{"run"}, flags...), "--", "sh", "-c", script)
	r := p.exec(t, args...)
	w := walled{result: r, Run: p.lastRun(t)}
	w.Events = p.events(t, w.Run.ID)
	w.out = sections(r.Stdout)
	return w
}

// String is what a failing assertion needs to show: output, record and events.
func (w walled) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit %d after %s\nstdout:\n%s\nstderr:\n%s\nrun: %+v\nevents:\n", w.Code, w.Took.Round(time.Millisecond), w.Stdout, w.Stderr, w.Run)
	for _, ev := range w.Events {
		fmt.Fprintf(&b, "  %s %s %s:%d addr=%s %s (%s) rule=%q\n", ev.Event, ev.Kind, ev.Host, ev.Port, ev.Addr, ev.Decision, ev.Reason, ev.Rule)
	}
	return b.String()
}

// Out is what the script printed under the marker "== name" (see sections).
func (w walled) Out(t *testing.T, name string) string {
	t.Helper()
	s, ok := w.out[name]
	if !ok {
		t.Fatalf("the run printed no section %q\n%s", name, w)
	}
	return s
}

var sectionRE = regexp.MustCompile(`(?m)^== (\S+)$`)

// sections splits a script's output at lines "== name".
func sections(out string) map[string]string {
	m := map[string]string{}
	idx := sectionRE.FindAllStringSubmatchIndex(out, -1)
	for i, loc := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		m[out[loc[2]:loc[3]]] = out[loc[1]:end]
	}
	return m
}

// sh quotes s for a POSIX shell.
func sh(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// step is one labelled command of a run's script: its output, then "rc=N".
func step(name, command string) string {
	return fmt.Sprintf("echo '== %s'; %s 2>&1; echo \"rc=$?\"\n", name, command)
}

var rcRE = regexp.MustCompile(`rc=(\d+)\s*$`)

// rc is the exit status a step printed last.
func rc(t *testing.T, out string) int {
	t.Helper()
	m := rcRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rc= in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// curlStep runs curl inside a run, printing the HTTP status after the body.
func curlStep(name string, args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = sh(a)
	}
	return step(name, "curl -sS --max-time 8 -w '\\nhttp=%{http_code}\\n' "+strings.Join(q, " "))
}

var httpRE = regexp.MustCompile(`(?m)^http=(\d+)$`)

// httpCode is the status a curlStep printed (0: no response).
func httpCode(out string) int {
	m := httpRE.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// events are a run's events.
type events []door.Event

// find returns the first event match accepts.
func (evs events) find(match func(door.Event) bool) (door.Event, bool) {
	for _, ev := range evs {
		if match(ev) {
			return ev, true
		}
	}
	return door.Event{}, false
}

// decision returns the decision of kind on host (and port, if not 0).
func (evs events) decision(kind, host string, port uint16) (door.Event, bool) {
	return evs.find(func(ev door.Event) bool {
		return ev.Event == "decision" && string(ev.Kind) == kind && ev.Host == host && (port == 0 || ev.Port == port)
	})
}

// about reports whether any event names host.
func (evs events) about(host string) bool {
	_, ok := evs.find(func(ev door.Event) bool { return ev.Host == host })
	return ok
}

// hitLog records every HTTP request a lab's web servers receive.
type hitLog struct {
	mu   sync.Mutex
	hits []hit
}

type hit struct {
	Host, Path, SNI, Server string
}

func (l *hitLog) handler(host string) http.Handler {
	echo := testhosts.EchoHandler(host)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hit{Host: r.Host, Path: r.URL.Path, Server: host}
		if r.TLS != nil {
			h.SNI = r.TLS.ServerName
		}
		l.mu.Lock()
		l.hits = append(l.hits, h)
		l.mu.Unlock()
		echo.ServeHTTP(w, r)
	})
}

// with returns the requests whose path contains s.
func (l *hitLog) with(s string) []hit {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []hit
	for _, h := range l.hits {
		if strings.Contains(h.Path, s) {
			out = append(out, h)
		}
	}
	return out
}

// packetLog records datagrams (UDP payloads, ICMP echo requests) a host receives.
type packetLog struct {
	mu   sync.Mutex
	pkts []string // "where from: payload"
}

func (l *packetLog) add(s string) {
	l.mu.Lock()
	l.pkts = append(l.pkts, s)
	l.mu.Unlock()
}

func (l *packetLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pkts)
}

// containing returns the packets whose record contains s.
func (l *packetLog) containing(s string) []string {
	var out []string
	for _, p := range l.all() {
		if strings.Contains(p, s) {
			out = append(out, p)
		}
	}
	return out
}

// recordPackets reads pc until it is closed, recording each datagram. The
// reader stops when the test ends.
func recordPackets(t *testing.T, pc net.PacketConn, what string, log *packetLog) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			log.add(fmt.Sprintf("%s from %s: %q", what, from, buf[:n]))
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
}

// listenICMP opens a raw ICMP socket inside h's network namespace, which sees
// every echo request that reaches h.
func listenICMP(h *testhosts.Host) (net.PacketConn, error) { return listenICMPAt(h, h.Addr) }

// listenICMPAt is listenICMP for echo requests to addr, an address h holds.
func listenICMPAt(h *testhosts.Host, addr netip.Addr) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.InNS(func() error {
		var err error
		pc, err = net.ListenPacket("ip4:icmp", addr.String())
		return err
	})
	return pc, err
}

// pingFromHost sends one ICMP echo request from the test's own namespace to a,
// carrying payload: the positive control for an ICMP recorder.
func pingFromHost(a netip.Addr, payload string) error {
	c, err := net.Dial("ip4:icmp", a.String())
	if err != nil {
		return err
	}
	return sendEcho(c, payload)
}

// pingFrom is pingFromHost from inside h's network namespace.
func pingFrom(h *testhosts.Host, a netip.Addr, payload string) error {
	return h.InNS(func() error {
		c, err := net.Dial("ip4:icmp", a.String())
		if err != nil {
			return err
		}
		return sendEcho(c, payload)
	})
}

// sendEcho writes one ICMP echo request carrying payload on c, and closes it.
func sendEcho(c net.Conn, payload string) error {
	defer c.Close()
	b := append([]byte{8, 0, 0, 0, 0x12, 0x34, 0, 1}, payload...)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	sum = (sum >> 16) + (sum & 0xffff)
	sum += sum >> 16
	cs := ^uint16(sum)
	b[2], b[3] = byte(cs>>8), byte(cs)
	_, err := c.Write(b)
	return err
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wallLab is the lab the wall's tests escape towards:
//   - web (allowed by CIDR and by name): HTTP on 80 and 8080, HTTPS on 443,
//     UDP recorders on 443 and 9999, an ICMP recorder;
//   - other (a private /24 no policy lists): HTTP, HTTPS, an ICMP recorder,
//     and a recording DNS server on 53 that no query may ever reach;
//   - ns: the door's resolver (--resolver), recording every name it is asked.
type wallLab struct {
	*testhosts.Lab
	Web, Other, NS *testhosts.Host
	Upstream       *testhosts.RecordingDNS // the door's resolver
	Outside        *testhosts.RecordingDNS // a resolver the run may try to use directly
	Hits           *hitLog
	UDP, ICMP      *packetLog
	// Fresh is an allowed name only one test looks up, so its arrival upstream
	// is that test's doing.
	Fresh string
	// CA is the lab CA's file, Probe the wallprobe binary.
	CA, Probe string
}

func newWallLab(t *testing.T) *wallLab {
	t.Helper()
	lab := testhosts.NewTestLab(t, "wall")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := &wallLab{Lab: lab, Hits: &hitLog{}, UDP: &packetLog{}, ICMP: &packetLog{},
		Fresh: "fresh-" + randHex(4) + ".web.test", CA: lab.CAFile(), Probe: wallprobe(t)}
	var err error
	for _, hp := range []struct {
		h    **testhosts.Host
		name string
	}{{&l.Web, "web"}, {&l.Other, "other"}, {&l.NS, "ns"}} {
		if *hp.h, err = lab.Host(ctx, hp.name); err != nil {
			t.Fatal(err)
		}
	}
	names := append(append([]string{l.Fresh}, webNames...), otherNames...)
	for _, h := range []*testhosts.Host{l.Web, l.Other} {
		if _, err := h.ServeHTTP(80, l.Hits.handler(h.Name)); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ServeHTTPS(443, l.Hits.handler(h.Name), names...); err != nil {
			t.Fatal(err)
		}
		pc, err := listenICMP(h)
		if err != nil {
			t.Fatal(err)
		}
		recordPackets(t, pc, "icmp at "+h.Name, l.ICMP)
	}
	if _, err := l.Web.ServeHTTP(8080, l.Hits.handler("web")); err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{443, 9999} {
		pc, err := l.Web.ListenPacket(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		recordPackets(t, pc, fmt.Sprintf("udp at web:%d", port), l.UDP)
	}
	answers := map[string][]netip.Addr{l.Fresh: {l.Web.Addr}}
	for _, n := range webNames {
		answers[n] = []netip.Addr{l.Web.Addr}
	}
	for _, n := range otherNames {
		answers[n] = []netip.Addr{l.Other.Addr}
	}
	if l.Upstream, err = l.NS.ServeDNS(53, answers); err != nil {
		t.Fatal(err)
	}
	if l.Outside, err = l.Other.ServeDNS(53, answers); err != nil {
		t.Fatal(err)
	}

	// Positive controls: each recorder sees what the test's own namespace
	// sends, so a recorder that saw nothing from the run saw nothing, rather
	// than being deaf.
	for _, h := range []*testhosts.Host{l.Web, l.Other} {
		mark := "control-" + randHex(4)
		if err := pingFromHost(h.Addr, mark); err != nil {
			t.Fatal(err)
		}
		if !eventually(3*time.Second, func() bool { return len(l.ICMP.containing(mark)) > 0 }) {
			t.Fatalf("the ICMP recorder on %s saw no echo request from the host side: %q", h.Name, l.ICMP.all())
		}
	}
	for _, port := range []int{443, 9999} {
		mark := "control-" + randHex(4)
		c, err := net.Dial("udp", netip.AddrPortFrom(l.Web.Addr, uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.WriteString(c, mark)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !eventually(3*time.Second, func() bool { return len(l.UDP.containing(mark)) > 0 }) {
			t.Fatalf("the UDP recorder on web:%d saw no datagram from the host side: %q", port, l.UDP.all())
		}
	}
	r := curl(t, "--resolve", "web.test:443:"+l.Web.Addr.String(), "--cacert", l.CA, "https://web.test/control")
	if r.Code != 0 || r.HTTP != 200 || len(l.Hits.with("/control")) != 1 {
		t.Fatalf("the web host does not answer from the host side: %+v", r)
	}
	return l
}

// policy is the lab's usual policy: web.test and its subdomains and
// inside.test allowed by name, secret.web.test denied, web's /24 opened.
func (l *wallLab) policy(t *testing.T) string {
	t.Helper()
	return writeFile(t, "wall-policy.hcl", fmt.Sprintf(`mode = "enforce"
ports = [80, 443]
allow = ["web.test", "inside.test"]
deny = ["secret.web.test"]
allow_cidrs = [%q]
`, l.Web.Prefix))
}

// poster gives a test its own measured home and a working directory holding
// wallprobe and the lab's CA.
func (l *wallLab) poster(t *testing.T) poster {
	t.Helper()
	return poster{
		Home: measuredHome(t),
		Dir:  workDir(t, map[string]string{"wallprobe": l.Probe, "ca.pem": l.CA}),
	}
}

// flags are the usual run flags: the lab's policy and resolver.
func (l *wallLab) flags(t *testing.T, extra ...string) []string {
	return append([]string{"--policy", l.policy(t), "--resolver", l.Upstream.Addr.String()}, extra...)
}

// netnsInodes maps every network namespace a process holds to the pids that
// hold it.
func netnsInodes() map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		l, err := os.Readlink("/proc/" + e.Name() + "/ns/net")
		if err != nil {
			continue
		}
		out[l] = append(out[l], pid)
	}
	return out
}

// procsRunning returns the pids of processes whose executable is exe.
func procsRunning(exe string) []int {
	return procsWhere(func(pid string) bool {
		l, err := os.Readlink("/proc/" + pid + "/exe")
		return err == nil && strings.TrimSuffix(l, " (deleted)") == exe
	})
}

// sleepers returns the pids of processes running exactly "sleep arg".
func sleepers(arg string) []int {
	want := []byte("sleep\x00" + arg + "\x00")
	return procsWhere(func(pid string) bool {
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		return err == nil && bytes.Equal(b, want)
	})
}

func procsWhere(match func(pid string) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if match(e.Name()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendsFrom reports whether pid's ancestry includes ancestor.
func descendsFrom(pid, ancestor int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid == ancestor {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 {
			return false
		}
		f := strings.Fields(s[j+1:])
		if len(f) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return pid == ancestor
}

// openFDs lists the test process's descriptors and what they point at.
func openFDs() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+" -> "+l)
	}
	return out
}

// nftTables is 'nft list tables' in the test's (the host's) namespace.
func nftTables(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v\n%s", err, out)
	}
	return string(out)
}
