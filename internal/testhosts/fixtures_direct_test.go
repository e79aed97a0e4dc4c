//go:build linux

package testhosts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	osexec "os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingProxy is a forward HTTP proxy on loopback that records the URL of
// every request it forwards. It proves a client's Proxy setting is obeyed:
// were it ignored, the proxy would see nothing.
type recordingProxy struct {
	URL string
	mu  sync.Mutex
	got []string
}

func (p *recordingProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	p := &recordingProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			p.got = append(p.got, r.In.URL.String())
			p.mu.Unlock()
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{Proxy: nil},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "this proxy forwards absolute-form requests only", http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.URL = "http://" + ln.Addr().String()
	return p
}

// fixtureFetch is one real client fetching one fixture.
type fixtureFetch struct {
	name  string
	tool  [2]string // program and the package that provides it
	path  string    // a URL path the client must ask for
	fetch func(ctx context.Context, base string, c Client) (*Fetched, error)
	want  string // SHA-256 of Fetched.File
	// corrupt names the served file whose middle byte a corruption test
	// flips; rejects is what the client says when it notices.
	corrupt, rejects string
}

func fixtureFetches(f *Fixtures) []fixtureFetch {
	return []fixtureFetch{
		{"apt", [2]string{"apt-get", "apt"}, f.Apt.DebPath, f.Apt.Fetch, f.Apt.DebSHA256, f.Apt.DebPath, "Hash Sum mismatch"},
		{"pip", [2]string{"python3", "python3-pip"}, f.Pip.WheelPath, f.Pip.Fetch, f.Pip.WheelSHA256, f.Pip.WheelPath, "DO NOT MATCH THE HASHES"},
		{"npm", [2]string{"npm", "npm"}, f.Npm.TarballPath, f.Npm.Fetch, f.Npm.PayloadSHA256, f.Npm.TarballPath, "EINTEGRITY"},
		{"go", [2]string{"go", "golang-go"}, f.Go.ZipPath, f.Go.Fetch, f.Go.ZipSHA256, f.Go.ZipPath, "zip: checksum error"},
		{"git-dumb", [2]string{"git", "git"}, f.Git.DumbPath + "/info/refs", func(ctx context.Context, base string, c Client) (*Fetched, error) {
			return f.Git.Clone(ctx, strings.TrimSuffix(base, "/")+f.Git.DumbPath, c)
		}, f.Git.PayloadSHA256, "", "corrupt"},
		{"git-smart", [2]string{"git", "git"}, f.Git.SmartPath + "/git-upload-pack", func(ctx context.Context, base string, c Client) (*Fetched, error) {
			return f.Git.Clone(ctx, strings.TrimSuffix(base, "/")+f.Git.SmartPath, c)
		}, f.Git.PayloadSHA256, "", ""},
	}
}

// serveFixtures builds every fixture under the lab's directory and serves it
// with nginx on a new host.
func serveFixtures(t *testing.T, ctx context.Context, lab *Lab) (*Fixtures, *Server) {
	t.Helper()
	RequireTool(t, "nginx", "nginx")
	RequireTool(t, "fcgiwrap", "fcgiwrap")
	RequireTool(t, "dpkg-scanpackages", "dpkg-dev")
	RequireTool(t, "git", "git")
	h, err := lab.Host(ctx, "fixtures")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f, err := BuildFixtures(ctx, filepath.Join(lab.Dir(), "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fixtures built in %v", time.Since(start).Round(time.Millisecond))
	srv, err := h.ServeNginx(ctx, NginxOptions{Root: f.Root, GitRoot: f.Git.GitRoot})
	if err != nil {
		t.Fatal(err)
	}
	return f, srv
}

// clientDir is a directory a client may write in, removed after the test.
func clientDir(t *testing.T, name string) string {
	t.Helper()
	d, err := os.MkdirTemp("", "postern-client-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d); os.RemoveAll(d + ".home") }) // the home beside Dir of a client run by a program
	return d
}

func TestRealClientsFetchFixturesDirect(t *testing.T) {
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, srv := serveFixtures(t, ctx, lab)

	// Proxy settings in the test's own environment point at a closed port
	// on loopback: a client they reached would fail to connect.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	poison := "http://" + closed.Addr().String()
	closed.Close()
	for _, k := range []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "ALL_PROXY", "npm_config_proxy", "PIP_PROXY"} {
		t.Setenv(k, poison)
	}
	t.Setenv("GOFLAGS", "-mod=vendor")
	proxy := newRecordingProxy(t)

	for _, ff := range fixtureFetches(f) {
		t.Run(ff.name, func(t *testing.T) {
			RequireTool(t, ff.tool[0], ff.tool[1])
			if ff.name == "pip" {
				requirePip(t)
			}

			// Direct, as a command line another program runs: the prefix
			// records the environment the client got, then runs it.
			dir := clientDir(t, ff.name)
			envFile := filepath.Join(dir, "env.txt")
			direct := Client{Dir: dir, Env: os.Environ(), Prefix: []string{"sh", "-c", `env > "$0"; exec "$@"`, envFile}}
			start := time.Now()
			got, err := ff.fetch(ctx, srv.URL, direct)
			if err != nil {
				t.Fatalf("direct: %v", err)
			}
			if got.SHA256 != ff.want {
				t.Fatalf("direct: %s has sha256 %s, want %s", got.File, got.SHA256, ff.want)
			}
			t.Logf("direct in %v: %s", time.Since(start).Round(time.Millisecond), got.SHA256)
			env, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(env), "\n") {
				name, _, _ := strings.Cut(line, "=")
				if strings.HasSuffix(strings.ToLower(name), "_proxy") || strings.HasPrefix(line, "GOFLAGS=-") {
					t.Fatalf("the direct run's environment has %q", line)
				}
			}

			// Through an explicit proxy: the same bytes, and the proxy saw the
			// fixture's requests. The same Dir as the direct fetch: that the
			// proxy sees the artifact again shows no cache of it was reused.
			before := len(proxy.seen())
			got, err = ff.fetch(ctx, srv.URL, Client{Dir: dir, Proxy: proxy.URL})
			if err != nil {
				t.Fatalf("through proxy: %v", err)
			}
			if got.SHA256 != ff.want {
				t.Fatalf("through proxy: %s has sha256 %s, want %s", got.File, got.SHA256, ff.want)
			}
			seen := proxy.seen()[before:]
			var asked bool
			for _, s := range seen {
				// apt asks for "/apt/./name.deb": compare cleaned paths.
				if u, err := url.Parse(s); err == nil && path.Clean(u.Path) == ff.path {
					asked = true
				}
			}
			if !asked {
				t.Fatalf("the proxy never saw %s; it saw %q", ff.path, seen)
			}
		})
	}
}

// Each client checks what it receives by itself: a byte flipped in the
// served artifact, its length kept, fails the client, not only Fetch's own
// comparison afterwards. A through-the-door test that passes therefore means
// the client accepted the bytes.
func TestRealClientsRejectCorruptedFixtures(t *testing.T) {
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, srv := serveFixtures(t, ctx, lab)
	cases := fixtureFetches(f)
	// git: flip a byte of a loose object (zlib data, checked by inflate and
	// by the object id) for the dumb clone.
	loose, err := looseObject(f.Git)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cases {
		if cases[i].name == "git-dumb" {
			cases[i].corrupt = loose
		}
	}
	for _, ff := range cases {
		if ff.corrupt == "" {
			continue
		}
		t.Run(ff.name, func(t *testing.T) {
			RequireTool(t, ff.tool[0], ff.tool[1])
			if ff.name == "pip" {
				requirePip(t)
			}
			file := filepath.Join(f.Root, filepath.FromSlash(strings.TrimPrefix(ff.corrupt, "/")))
			orig, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			bad := append([]byte(nil), orig...)
			bad[len(bad)/2] ^= 0x55
			if err := os.WriteFile(file, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(file, orig, 0o644)
			got, err := ff.fetch(ctx, srv.URL, Client{Dir: clientDir(t, ff.name+"-corrupt")})
			if err == nil {
				t.Fatalf("the client accepted a corrupted %s: %+v", ff.corrupt, got)
			}
			if errors.Is(err, ErrMismatch) {
				t.Fatalf("the client accepted a corrupted %s; only the fixture's own check caught it: %v", ff.corrupt, err)
			}
			if !strings.Contains(err.Error(), ff.rejects) {
				t.Fatalf("the client failed, but not saying %q: %v", ff.rejects, err)
			}
			t.Logf("rejected: %s", lastLine(err.Error()))
		})
	}
}

// requirePip skips (or, where tests must run, fails) without pip for python3.
func requirePip(t *testing.T) {
	t.Helper()
	out, err := osexec.Command("python3", "-m", "pip", "--version").CombinedOutput()
	if err != nil {
		skipOrFail(t, fmt.Sprintf("needs pip for python3 (apt-get install python3-pip): %v: %s", err, strings.TrimSpace(string(out))))
	}
}

// looseObject returns the URL path of a loose object of the dumb repository.
func looseObject(g *GitRepo) (string, error) {
	objects := filepath.Join(g.GitRoot, filepath.Base(g.DumbPath), "objects")
	var found string
	err := filepath.WalkDir(objects, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return err
		}
		rel, _ := filepath.Rel(objects, p)
		if len(rel) == 41 && rel[2] == '/' {
			found = g.DumbPath + "/objects/" + filepath.ToSlash(rel)
		}
		return nil
	})
	if err == nil && found == "" {
		err = errors.New("no loose object in the fixture repository")
	}
	return found, err
}

func lastLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(strings.TrimSpace(s)))
	var last string
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}
