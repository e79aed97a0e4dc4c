//go:build linux

package testhosts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// A child process started by TestSweepRemovesDeadOwners makes a lab and dies
// without closing it.
func TestMain(m *testing.M) {
	if os.Getenv("TESTHOSTS_ABANDON") == "1" {
		lab, err := NewLab(context.Background(), "abandon")
		if err == nil {
			var h *Host
			h, err = lab.Host(context.Background(), "orphan")
			if err == nil {
				fmt.Println(h.NetNS, h.Link)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0) // no Close: the slot lock dies with the process
	}
	os.Exit(m.Run())
}

func newLab(t *testing.T) *Lab {
	t.Helper()
	RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lab, err := NewLab(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return lab
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s%s", cmd.Args, err, out, stderr.String())
	}
	return string(out)
}

func TestHostServesHTTPAndHTTPS(t *testing.T) {
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := lab.Host(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !lab.Subnet().Contains(h.Addr) || !h.Prefix.Contains(h.Gateway) || h.Addr == h.Gateway {
		t.Fatalf("host %s gw %s prefix %s outside lab %s", h.Addr, h.Gateway, h.Prefix, lab.Subnet())
	}
	plain, err := h.ServeHTTP(8080, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("http://%s:8080/", h.Addr); plain.URL != want {
		t.Fatalf("URL = %q, want %q", plain.URL, want)
	}
	out := run(t, exec.CommandContext(ctx, "curl", "-sS", "--noproxy", "*", "--max-time", "5", plain.URL+"x?y=1"))
	var rep EchoReply
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if rep.ServedBy != "web" || rep.Host != plain.Addr.String() || rep.URI != "/x?y=1" || rep.TLS {
		t.Fatalf("reply %+v", rep)
	}
	if !strings.HasPrefix(rep.Remote, h.Gateway.String()+":") {
		t.Fatalf("client seen as %s, want the root side %s", rep.Remote, h.Gateway)
	}

	tlsSrv, err := h.ServeHTTPS(0, nil, "web.test", "www.web.test")
	if err != nil {
		t.Fatal(err)
	}
	if tlsSrv.CAFile != lab.CAFile() || tlsSrv.Addr.Port() == 0 {
		t.Fatalf("https server %+v", tlsSrv)
	}
	port := tlsSrv.Addr.Port()
	out = run(t, exec.CommandContext(ctx, "curl", "-sS", "--noproxy", "*", "--max-time", "5",
		"--cacert", tlsSrv.CAFile, "--resolve", fmt.Sprintf("www.web.test:%d:%s", port, h.Addr),
		fmt.Sprintf("https://www.web.test:%d/", port)))
	rep = EchoReply{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if !rep.TLS || rep.SNI != "www.web.test" || rep.ServedBy != "web" {
		t.Fatalf("tls reply %+v", rep)
	}
	// A name the certificate does not cover fails verification.
	cmd := exec.CommandContext(ctx, "curl", "-sS", "--noproxy", "*", "--max-time", "5",
		"--cacert", tlsSrv.CAFile, "--resolve", fmt.Sprintf("other.test:%d:%s", port, h.Addr),
		fmt.Sprintf("https://other.test:%d/", port))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Fatalf("curl to a name outside the certificate: err=%v out=%s", err, out)
	}
}

func TestHostServesDNSAndRecords(t *testing.T) {
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := lab.Host(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddr("10.99.1.2")
	d, err := h.ServeDNS(0, map[string][]netip.Addr{"Known.Test.": {want, netip.MustParseAddr("fd00::7")}})
	if err != nil {
		t.Fatal(err)
	}
	dig := func(args ...string) string {
		base := []string{"@" + d.Addr.Addr().String(), "-p", fmt.Sprint(d.Addr.Port()), "+short", "+time=2", "+tries=1"}
		return strings.TrimSpace(run(t, exec.CommandContext(ctx, "dig", append(base, args...)...)))
	}
	if got := dig("known.test", "A"); got != want.String() {
		t.Fatalf("A known.test = %q, want %s", got, want)
	}
	if got := dig("+tcp", "KNOWN.test", "AAAA"); got != "fd00::7" {
		t.Fatalf("AAAA over tcp = %q", got)
	}
	full := run(t, exec.CommandContext(ctx, "dig", "@"+d.Addr.Addr().String(), "-p", fmt.Sprint(d.Addr.Port()), "+time=2", "+tries=1", "unknown.test"))
	if !strings.Contains(full, "NXDOMAIN") {
		t.Fatalf("unknown name not NXDOMAIN:\n%s", full)
	}
	if q := d.Queries(); len(q) != 3 || q[0] != "known.test" || q[1] != "known.test" || q[2] != "unknown.test" {
		t.Fatalf("queries = %q", q)
	}
	if !d.Asked("UNKNOWN.test.") || d.Asked("never.test") {
		t.Fatalf("Asked wrong: %q", d.Queries())
	}
}

func TestHostStreamsAndCommands(t *testing.T) {
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := lab.Host(ctx, "stream")
	if err != nil {
		t.Fatal(err)
	}
	echo, err := h.ServeTCPEcho(0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", echo.Addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := c.Read(buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q %v", buf, err)
	}

	bulk, err := h.ServeBulk(0)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := net.DialTimeout("tcp", bulk.Addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	const n = 64 << 20
	if got, err := FetchBulk(bc, n); err != nil || got != n {
		t.Fatalf("bulk: %d %v", got, err)
	}

	// A command inside the host sees only lo and eth0, reaches the root side of
	// its link, and has no route anywhere else.
	out := run(t, h.Command(ctx, "ip", "-o", "link", "show"))
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "lo:") || !strings.Contains(out, "eth0@") {
		t.Fatalf("links inside host:\n%s", out)
	}
	if out, err := h.Command(ctx, "ip", "route", "get", "192.0.2.1").CombinedOutput(); err == nil {
		t.Fatalf("host has a route beyond its link: %s", out)
	}
	rootLn, err := net.Listen("tcp4", h.Gateway.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer rootLn.Close()
	go func() {
		if c, err := rootLn.Accept(); err == nil {
			c.Write([]byte("hello from root"))
			c.Close()
		}
	}()
	out = run(t, h.Command(ctx, "socat", "-T2", "-", "TCP:"+rootLn.Addr().String()))
	if out != "hello from root" {
		t.Fatalf("from inside host: %q", out)
	}
	// Dial from inside the host in-process.
	hc, err := h.Dial(ctx, echo.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if la := hc.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(); la != h.Addr {
		t.Fatalf("dial from host came from %s, want %s", la, h.Addr)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	goroutines := runtime.NumGoroutine()
	fds := countFDs(t)

	lab, err := NewLab(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []*Host
	for _, name := range []string{"a", "b", "c"} {
		h, err := lab.Host(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
		if _, err := h.ServeHTTP(80, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ServeHTTPS(443, nil, name+".test"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ServeDNS(53, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ServeTCPEcho(7); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lab.Host(ctx, "a"); err == nil {
		t.Fatal("duplicate host name accepted")
	}
	// An open client connection must not keep anything alive past Close.
	c, err := net.Dial("tcp", netip.AddrPortFrom(hosts[0].Addr, 7).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := lab.Dir()

	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, h := range hosts {
		if _, err := os.Stat(filepath.Join(netnsDir, h.NetNS)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns %s still exists: %v", h.NetNS, err)
		}
		if _, err := netlink.LinkByName(h.Link); err == nil {
			t.Errorf("link %s still exists", h.Link)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lab dir %s still exists", dir)
	}
	if _, err := lab.Host(ctx, "late"); !errors.Is(err, ErrClosed) {
		t.Errorf("host after close: %v", err)
	}
	c.Close()
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
	waitFor(t, "fds to close", func() bool { return countFDs(t) <= fds })
}

func TestLabsInOneProcessGetDistinctSubnets(t *testing.T) {
	a := newLab(t)
	b := newLab(t)
	if a.Subnet().Overlaps(b.Subnet()) {
		t.Fatalf("labs share %s and %s", a.Subnet(), b.Subnet())
	}
	ctx := context.Background()
	ha, err := a.Host(ctx, "same")
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Host(ctx, "same")
	if err != nil {
		t.Fatal(err)
	}
	if ha.NetNS == hb.NetNS || ha.Link == hb.Link || ha.Addr == hb.Addr {
		t.Fatalf("hosts collide: %+v %+v", ha, hb)
	}
}

func TestSweepRemovesDeadOwners(t *testing.T) {
	RequireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESTHOSTS_ABANDON=1")
	out := strings.Fields(run(t, cmd))
	if len(out) != 2 {
		t.Fatalf("child said %q", out)
	}
	ns, link := out[0], out[1]
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
		t.Fatalf("abandoned netns %s missing before sweep: %v", ns, err)
	}
	// A live lab must survive the sweep.
	live := newLab(t)
	lh, err := live.Host(context.Background(), "alive")
	if err != nil {
		t.Fatal(err)
	}
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("abandoned netns %s survived sweep: %v", ns, err)
	}
	if _, err := netlink.LinkByName(link); err == nil {
		t.Errorf("abandoned link %s survived sweep", link)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, lh.NetNS)); err != nil {
		t.Errorf("live netns %s removed by sweep: %v", lh.NetNS, err)
	}
	if _, err := netlink.LinkByName(lh.Link); err != nil {
		t.Errorf("live link %s removed by sweep: %v", lh.Link, err)
	}
}

// countFDs counts the sockets and namespace handles the process holds: what a
// lab opens. (Pipes are left out: the runtime pools splice pipes.)
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "net:") {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Another tool that names network namespaces (ip netns, podman's netavark)
// binds /run/netns over itself if it is not a mount point yet; the lab's
// namespaces made before that must still be removable afterwards.
func TestCloseAfterAnotherToolNamesANamespace(t *testing.T) {
	RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lab, err := NewLab(ctx, "othertool")
	if err != nil {
		t.Fatal(err)
	}
	h, err := lab.Host(ctx, "a")
	if err != nil {
		lab.Close()
		t.Fatal(err)
	}
	other := fmt.Sprintf("postern-othertool-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		lab.Close()
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "del", other).CombinedOutput(); err != nil {
		t.Errorf("ip netns del: %v: %s", err, out)
	}
	if err := lab.Close(); err != nil {
		t.Fatalf("close after another tool named a namespace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, h.NetNS)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still exists: %v", h.NetNS, err)
	}
}
