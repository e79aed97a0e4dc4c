//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// The data path, differentially: every fetch is made directly and through
// each of postern's paths — the explicit door, plain HTTP inside a CONNECT
// tunnel, the local wall, a container, a remote machine over sshd — by
// clients nobody here wrote (curl as HTTP/1.1 and 1.0, GNU wget, busybox
// wget), from servers nobody here wrote (nginx; Python's http.server, HTTP/1.0
// and close-delimited) and from one that splits, trickles and frames its
// responses every way a server may. Each fetch prints one line — exit status,
// HTTP status, sha256 of what arrived — and every path's lines must equal the
// direct path's.

// diffServers are the servers one host runs for the differential tests, and
// what they serve.
type diffServers struct {
	Nginx, Python *testhosts.Server
	Raw           *testhosts.RawServer
}

// Ports the differential servers listen on, named in the policies.
const (
	diffNginxPort  = 80
	diffPythonPort = 8000
	diffRawPort    = 8001
)

// diffBlobs are the file sizes fetched from nginx and python.
var diffBlobs = testhosts.Sizes

// diffRoot writes the blobs served by nginx and python into a directory.
func diffRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "www")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range diffBlobs {
		f, err := os.Create(filepath.Join(root, fmt.Sprintf("blob-%d", n)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadFrom(testhosts.BodyReader(n, uint64(n)+1)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// serveDiff starts the three servers on h at addr, nginx on nginxPort.
func serveDiff(t *testing.T, h *testhosts.Host, addr netip.Addr, root string, nginxPort int) diffServers {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s diffServers
	var err error
	if s.Nginx, err = h.ServeNginx(ctx, testhosts.NginxOptions{Root: root, Port: nginxPort, Addr: addr}); err != nil {
		t.Fatal(err)
	}
	if s.Python, err = h.ServePythonAt(ctx, addr, root, diffPythonPort); err != nil {
		t.Fatal(err)
	}
	if s.Raw, err = h.ServeRawHTTPAt(addr, diffRawPort, testhosts.RawOptions{Seed: 42, Pause: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return s
}

// diffClient is one client program, as a shell command that fetches $u into
// the file o and sets $code to the HTTP status (or - when it cannot tell).
type diffClient struct {
	name string
	cmd  string
}

var (
	curl11  = diffClient{"curl", `code=$(curl -sS --max-time 60 -o o -w '%{http_code}' "$@" "$u")`}
	curl10  = diffClient{"curl1.0", `code=$(curl -sS --http1.0 --max-time 60 -o o -w '%{http_code}' "$@" "$u")`}
	gnuWget = diffClient{"wget", `wget -q -T 60 -t 1 -O o "$@" "$u"; code=-`}
	bbWget  = diffClient{"busybox-wget", `busybox wget -q -T 60 -O o "$@" "$u"; code=-`}
)

// diffFetch is one fetch: a client, a URL path on a server, extra arguments.
type diffFetch struct {
	key    string
	client diffClient
	server string // "nginx", "python", "raw"
	path   string
	args   []string
}

// diffFetches are the fetches made on every path by the clients given.
func diffFetches(clients []diffClient, big bool) []diffFetch {
	var out []diffFetch
	add := func(c diffClient, server, path string, args ...string) {
		key := fmt.Sprintf("%s:%s%s", c.name, server, path)
		if len(args) > 0 {
			key += ":" + strings.Join(args, ",")
		}
		out = append(out, diffFetch{key: strings.NewReplacer(" ", "_", "'", "").Replace(key), client: c, server: server, path: path, args: args})
	}
	for _, c := range clients {
		for _, n := range diffBlobs {
			if n >= 100<<20 && (!big || c.name != "curl") {
				continue
			}
			add(c, "nginx", fmt.Sprintf("/blob-%d", n))
			if n < 100<<20 {
				add(c, "python", fmt.Sprintf("/blob-%d", n))
				add(c, "python", fmt.Sprintf("%sblob-%d", testhosts.PythonClosePath, n))
			}
		}
		for _, n := range []int64{0, 1, 13, 16<<10 - 1, 16<<10 + 1, 1 << 20} {
			for _, fr := range []testhosts.Frame{testhosts.FrameLength, testhosts.FrameChunked, testhosts.FrameClose} {
				q := testhosts.RawQuery{N: n, Seed: uint64(n) + 7, Frame: fr, Split: 7, Trickle: n < 64<<10}
				add(c, "raw", q.Path())
			}
		}
		add(c, "raw", testhosts.RawQuery{N: 5000, Seed: 3, Frame: testhosts.FrameChunked, Split: 3, Hints: 2}.Path())
		add(c, "nginx", testhosts.NginxGzipPath+"blob-1048576", "--header", "Accept-Encoding: gzip")
		if strings.HasPrefix(c.name, "curl") {
			add(c, "nginx", "/blob-1048576", "-r", "1000-600000")
			add(c, "nginx", "/blob-16384", "-H", "If-None-Match: *")
		}
	}
	return out
}

// diffScript is a shell script making every fetch against the servers at
// host (a name or an address), printing "KEY rc=N code=C sha=H" per fetch.
// Clients run in the script's working directory.
func diffScript(fetches []diffFetch, host func(server string) string) string {
	var b strings.Builder
	b.WriteString("set -u\n")
	for _, f := range fetches {
		fmt.Fprintf(&b, "u=%s\nset -- %s\nrm -f o; : > o\n%s\nrc=$?\nset -- $(sha256sum o)\necho %s rc=$rc code=$code sha=$1\n",
			sh("http://"+host(f.server)+f.path), shArgs(f.args), f.client.cmd, sh(f.key))
	}
	return b.String()
}

func shArgs(args []string) string {
	var q []string
	for _, a := range args {
		q = append(q, sh(a))
	}
	return strings.Join(q, " ")
}

// diffLines parses a script's output into key → result.
func diffLines(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if ok && strings.HasPrefix(v, "rc=") {
			m[k] = v
		}
	}
	return m
}

// compareDiff fails t for every fetch whose line on path differs from direct.
func compareDiff(t *testing.T, path string, fetches []diffFetch, direct, got map[string]string, extra string) {
	t.Helper()
	var bad []string
	for _, f := range fetches {
		d, ok := direct[f.key]
		if !ok {
			t.Fatalf("the direct path has no result for %s", f.key)
		}
		if !strings.HasPrefix(d, "rc=0 ") {
			t.Fatalf("the direct fetch %s failed: %s", f.key, d)
		}
		if g := got[f.key]; g != d {
			bad = append(bad, fmt.Sprintf("  %s: direct %q, %s %q", f.key, d, path, g))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Fatalf("%d of %d fetches through %s differ from the direct path:\n%s\n%s", len(bad), len(fetches), path, strings.Join(bad, "\n"), extra)
	}
	t.Logf("%d fetches through %s match the direct path byte for byte", len(fetches), path)
}

// runDirect runs a script in the root namespace with no proxy.
func runDirect(t *testing.T, dir, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir, cmd.Env = dir, curlEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("direct fetches: %v\n%s", err, out)
	}
	return string(out)
}

func TestDataPathMatchesDirect(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	testhosts.RequireTool(t, "wget", "wget")
	lab := testhosts.NewTestLab(t, "diff")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	files, err := lab.Host(ctx, "files")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := lab.Host(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	root := diffRoot(t)
	serveDiff(t, files, files.Addr, root, diffNginxPort)
	dns, err := ns.ServeDNS(53, map[string][]netip.Addr{"files.test": {files.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	port := map[string]int{"nginx": diffNginxPort, "python": diffPythonPort, "raw": diffRawPort}
	byAddr := func(s string) string { return fmt.Sprintf("%s:%d", files.Addr, port[s]) }
	byName := func(s string) string { return fmt.Sprintf("files.test:%d", port[s]) }
	all := []diffClient{curl11, curl10, gnuWget, bbWget}
	fetches := diffFetches(all, true)
	direct := diffLines(t, runDirect(t, t.TempDir(), diffScript(fetches, byAddr)))

	policy := writeFile(t, "diff-policy.hcl", fmt.Sprintf(`mode = "enforce"
ports = [%d, %d, %d]
allow = ["files.test"]
allow_cidrs = [%q]
`, diffNginxPort, diffPythonPort, diffRawPort, files.Prefix))

	t.Run("explicit", func(t *testing.T) {
		d := startDoor(t, mustRead(t, policy), "", "--resolver", dns.Addr.String())
		proxy := "http://" + d.Addr
		env := "export http_proxy=" + proxy + "\n"
		var script strings.Builder
		script.WriteString(env)
		for _, f := range fetches {
			if f.client.name == "curl" || f.client.name == "curl1.0" {
				f.args = append([]string{"-x", proxy}, f.args...)
			} else if f.client.name == "wget" {
				f.args = append([]string{"-e", "use_proxy=on"}, f.args...)
			}
			script.WriteString(diffScript([]diffFetch{f}, byName))
		}
		got := diffLines(t, runDirect(t, t.TempDir(), script.String()))
		compareDiff(t, "the explicit door", fetches, direct, got, "")
	})

	t.Run("connect", func(t *testing.T) {
		d := startDoor(t, mustRead(t, policy), "", "--resolver", dns.Addr.String())
		proxy := "http://" + d.Addr
		var sub []diffFetch
		for _, f := range fetches {
			if strings.HasPrefix(f.client.name, "curl") {
				f.args = append([]string{"-p", "-x", proxy}, f.args...)
				sub = append(sub, f)
			}
		}
		got := diffLines(t, runDirect(t, t.TempDir(), diffScript(sub, byName)))
		compareDiff(t, "plain HTTP in a CONNECT tunnel", sub, direct, got, "")
		for _, ev := range d.Events() {
			if ev.Kind == "http" {
				t.Fatalf("curl -p sent absolute-URI requests instead of tunnelling: %+v", ev)
			}
		}
	})

	t.Run("wall", func(t *testing.T) {
		p := poster{Home: measuredHome(t), Dir: t.TempDir()}
		r := p.exec(t, "run", "--policy", policy, "--resolver", dns.Addr.String(), "--", "sh", "-c", diffScript(fetches, byName))
		if r.Code != 0 {
			t.Fatalf("walled run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
		}
		compareDiff(t, "the local wall", fetches, direct, diffLines(t, r.Stdout), r.Stderr)
	})

	t.Run("container", func(t *testing.T) {
		ctrSetup(t)
		home := ctrHomeCopy(t)
		sub := diffFetches([]diffClient{bbWget}, false)
		script := strings.ReplaceAll(diffScript(sub, byName), "busybox wget", "wget")
		r := ctrPostern(t, home, "run", "--policy", policy, "--resolver", dns.Addr.String(), "--container", ctrImage, "--", "sh", "-c", "cd /tmp && "+script)
		if r.Code != 0 {
			t.Fatalf("container run: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
		}
		compareDiff(t, "a container", sub, direct, diffLines(t, r.Stdout), r.Stderr)
	})

	t.Run("remote", func(t *testing.T) {
		r := newRemoteLab(t)
		r.addAndProbe(t, "far")
		// The remote lab's own echo server has port 80 on the link.
		const remoteNginx = 8080
		rroot := diffRoot(t)
		serveDiff(t, r.Upstream, r.Link.AddrB, rroot, remoteNginx)
		rdns, err := r.Remote.Host.ServeDNS(5353, map[string][]netip.Addr{"files.test": {r.Link.AddrB}})
		if err != nil {
			t.Fatal(err)
		}
		rpolicy := writeFile(t, "diff-remote-policy.hcl", fmt.Sprintf(`mode = "enforce"
ports = [%d, %d, %d]
allow = ["files.test"]
allow_cidrs = [%q]
`, remoteNginx, diffPythonPort, diffRawPort, r.Link.Prefix))
		sub := diffFetches([]diffClient{curl11, curl10, gnuWget}, true)
		remotePort := map[string]int{"nginx": remoteNginx, "python": diffPythonPort, "raw": diffRawPort}
		byName := func(s string) string { return fmt.Sprintf("files.test:%d", remotePort[s]) }
		stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--policy", rpolicy, "--resolver", rdns.Addr.String(), "--",
			"sh", "-c", "cd \"$(mktemp -d)\" && "+diffScript(sub, byName))
		if code != 0 {
			t.Fatalf("remote run: exit %d\n%s\n%s", code, stdout, stderr)
		}
		compareDiff(t, "a remote machine", sub, direct, diffLines(t, stdout), stderr)
	})
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// realClientFetch is one real client's whole job against a fixture.
type realClientFetch struct {
	name  string
	tool  [2]string // program, Debian package
	fetch func(ctx context.Context, base string, c testhosts.Client) (*testhosts.Fetched, error)
	want  string // sha256 of what must land
}

func realClientFetches(f *testhosts.Fixtures) []realClientFetch {
	git := func(path string) func(context.Context, string, testhosts.Client) (*testhosts.Fetched, error) {
		return func(ctx context.Context, base string, c testhosts.Client) (*testhosts.Fetched, error) {
			return f.Git.Clone(ctx, strings.TrimSuffix(base, "/")+path, c)
		}
	}
	return []realClientFetch{
		{"apt", [2]string{"apt-get", "apt"}, f.Apt.Fetch, f.Apt.DebSHA256},
		{"pip", [2]string{"python3", "python3-pip"}, f.Pip.Fetch, f.Pip.WheelSHA256},
		{"npm", [2]string{"npm", "npm"}, f.Npm.Fetch, f.Npm.PayloadSHA256},
		{"go", [2]string{"go", "golang-go"}, f.Go.Fetch, f.Go.ZipSHA256},
		{"git-dumb", [2]string{"git", "git"}, git(f.Git.DumbPath), f.Git.PayloadSHA256},
		{"git-smart", [2]string{"git", "git"}, git(f.Git.SmartPath), f.Git.PayloadSHA256},
	}
}

// Real clients doing real work — apt-get, pip, npm, go mod download, git over
// dumb and smart HTTP — against local servers on a test host, each with its
// own integrity checks: through the explicit door, and inside the wall.
func TestRealClientsThroughTheDoorAndTheWall(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	for _, tool := range [][2]string{{"nginx", "nginx"}, {"fcgiwrap", "fcgiwrap"}, {"dpkg-scanpackages", "dpkg-dev"}, {"git", "git"}} {
		testhosts.RequireTool(t, tool[0], tool[1])
	}
	lab := testhosts.NewTestLab(t, "clients")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	files, err := lab.Host(ctx, "files")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := lab.Host(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	fx, err := testhosts.BuildFixtures(ctx, filepath.Join(lab.Dir(), "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.ServeNginx(ctx, testhosts.NginxOptions{Root: fx.Root, GitRoot: fx.Git.GitRoot, Port: 80}); err != nil {
		t.Fatal(err)
	}
	dns, err := ns.ServeDNS(53, map[string][]netip.Addr{"files.test": {files.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	policy := writeFile(t, "clients-policy.hcl", fmt.Sprintf(`mode = "enforce"
ports = [80]
allow = ["files.test"]
allow_cidrs = [%q]
`, files.Prefix))
	const base = "http://files.test/"
	d := startDoor(t, mustRead(t, policy), "", "--resolver", dns.Addr.String())
	home := measuredHome(t)
	work := t.TempDir()

	for _, rc := range realClientFetches(fx) {
		t.Run(rc.name, func(t *testing.T) {
			testhosts.RequireTool(t, rc.tool[0], rc.tool[1])
			// Through the explicit door.
			got, err := rc.fetch(ctx, base, testhosts.Client{Dir: filepath.Join(t.TempDir(), "door"), Env: curlEnv(), Proxy: "http://" + d.Addr})
			if err != nil {
				t.Fatalf("through the explicit door: %v", err)
			}
			if got.SHA256 != rc.want {
				t.Fatalf("through the explicit door: %s has sha256 %s, want %s", got.File, got.SHA256, rc.want)
			}
			// Inside the wall, with no proxy setting at all: the wall sends
			// its connections to the door.
			dir := filepath.Join(work, rc.name)
			c := testhosts.Client{Dir: dir, Env: append(curlEnv(), "POSTERN_HOME="+home),
				Prefix: []string{binFor(t), "run", "--policy", policy, "--resolver", dns.Addr.String(), "--"}}
			got, err = rc.fetch(ctx, base, c)
			if err != nil {
				t.Fatalf("inside the wall: %v", err)
			}
			if got.SHA256 != rc.want {
				t.Fatalf("inside the wall: %s has sha256 %s, want %s", got.File, got.SHA256, rc.want)
			}
		})
	}
}
