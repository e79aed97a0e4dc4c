//go:build linux

package testhosts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Client is how a fixture's real client (apt-get, pip, npm, go, git) is run,
// so the same fixture can be fetched directly, through an explicit proxy, or
// by a command line another program runs:
//
//	direct:           Client{Dir: d}
//	explicit proxy:   Client{Dir: d, Proxy: "http://10.160.0.1:3128"}
//	run by a program: Client{Dir: d, Prefix: []string{"postern", "run", "--policy", p, "--"}}
//
// Proxy and Prefix combine. The client's whole configuration is private to Dir
// (no system or user configuration file is read), and no proxy setting of the
// test's own environment reaches it: only Proxy sets one.
type Client struct {
	// Dir holds everything the client writes: its configuration, caches,
	// state and what it fetches, each client in its own subdirectory
	// (apt, pip, npm, go, git), which every Fetch empties first so that
	// nothing comes from an earlier fetch's cache. It is made if missing. It must be writable
	// where the client runs; inside postern's wall that means under the run's
	// working directory, and not under /tmp (the run's own there).
	Dir string
	// Env is the environment the client starts with, as KEY=VALUE. Nil
	// means a minimal one (PATH and LANG). Either way proxy variables,
	// the clients' own configuration variables (APT_CONFIG, PIP_*,
	// npm_config_*, GO*, GIT_*) and HOME, TMPDIR and XDG_* are replaced by
	// the fixture's, with HOME and TMPDIR under Dir. Anything else (e.g.
	// POSTERN_HOME for a Prefix) passes through.
	Env []string
	// Proxy, if set, is an explicit HTTP proxy URL. The client is told to use
	// it both by its own setting (apt's Acquire::http::Proxy, pip's --proxy,
	// npm's --proxy, git's http.proxy) and by http_proxy/HTTP_PROXY (go).
	Proxy string
	// Prefix is put before the client's command line: the client is run as
	// Prefix[0] with Prefix[1:] and then its own argv.
	Prefix []string
}

// Fetched is what a real client fetched from a fixture, after the client's
// own integrity checks passed and the fixture's expectations were met.
type Fetched struct {
	// File is the artifact as it landed in the client's Dir: the .deb, the
	// wheel, the installed package's payload, the module's zip, the clone's
	// payload.
	File string
	// SHA256 is the hex SHA-256 of File.
	SHA256 string
	// Output is everything the client printed, in order.
	Output string
}

// ErrMismatch means a client reported success but what arrived differs from
// what the fixture serves.
var ErrMismatch = errors.New("fetched bytes differ from the fixture's")

// droppedEnv reports whether the variable name must not reach a client from
// the caller's environment.
func droppedEnv(name string) bool {
	lower := strings.ToLower(name)
	switch lower {
	case "http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy", "socks_proxy", "rsync_proxy",
		"home", "tmpdir", "apt_config", "curl_home", "netrc":
		return true
	}
	for _, p := range []string{"pip_", "npm_config_", "git_", "xdg_"} {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	// Go reads every GO* variable (GOFLAGS, GOPROXY, GONOSUMDB, GOENV, …).
	return strings.HasPrefix(name, "GO")
}

// env builds the client's environment: the caller's (or a minimal one) less
// what droppedEnv names, then HOME and TMPDIR under Dir, the proxy if any,
// then extra.
func (c Client) env(extra ...string) ([]string, error) {
	base := c.Env
	if base == nil {
		base = baseEnv()
	}
	var env []string
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !droppedEnv(name) {
			env = append(env, kv)
		}
	}
	home, tmp := filepath.Join(c.Dir, "home"), filepath.Join(c.Dir, "tmp")
	if len(c.Prefix) > 0 {
		// A program that confines what it runs may refuse a working
		// directory holding the home (postern's wall does: the home is
		// read, never written for real): the home goes beside Dir.
		home = c.Dir + ".home"
	}
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	env = append(env, "HOME="+home, "TMPDIR="+tmp)
	if c.Proxy != "" {
		env = append(env, "http_proxy="+c.Proxy, "HTTP_PROXY="+c.Proxy, "https_proxy="+c.Proxy, "HTTPS_PROXY="+c.Proxy)
	}
	return append(env, extra...), nil
}

// run runs the client's argv (after Prefix) in dir with the client's
// environment and extra, and returns its standard output and everything it
// printed (stdout and stderr interleaved). On ctx's end it sends SIGTERM,
// then SIGKILL after five seconds.
func (c Client) run(ctx context.Context, dir string, extra []string, argv ...string) (stdout, all string, err error) {
	if c.Dir == "" {
		return "", "", errors.New("client: Client.Dir is empty: give the directory the client may write in")
	}
	env, err := c.env(extra...)
	if err != nil {
		return "", "", fmt.Errorf("client environment: %w", err)
	}
	full := append(append([]string(nil), c.Prefix...), argv...)
	runDir := dir
	if len(c.Prefix) > 0 {
		// A program that confines what it runs to its working directory
		// (postern's wall keeps only that of the host's temporary
		// directories) runs in Dir, which holds the client's whole
		// configuration; the client itself then starts in dir.
		full = append(append(append([]string(nil), c.Prefix...), "sh", "-c", `cd "$0" && exec "$@"`, dir), argv...)
		runDir = c.Dir
	}
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = env
	cmd.Dir = runDir
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	both := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, both), both
	err = cmd.Run()
	if err != nil {
		return out.String(), both.String(), fmt.Errorf("%s: %w; it printed:\n%s", strings.Join(full, " "), err, strings.TrimSpace(both.String()))
	}
	return out.String(), both.String(), nil
}

// fixtureURL joins a fixture's path to base, the server's URL
// ("http://host:port" or with a trailing slash).
func fixtureURL(base, path string) string {
	return strings.TrimSuffix(base, "/") + path
}

// hostOf returns the host (without port) of rawURL.
func hostOf(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("server URL %q: want http://host:port", rawURL)
	}
	return u.Hostname(), nil
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkFile returns a Fetched for path if its SHA-256 is want.
func checkFile(path, want, output string) (*Fetched, error) {
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, fmt.Errorf("the client said it fetched %s: %w; it printed:\n%s", path, err, output)
	}
	if sum != want {
		return nil, fmt.Errorf("%w: %s has sha256 %s, the fixture serves %s", ErrMismatch, path, sum, want)
	}
	return &Fetched{File: path, SHA256: sum, Output: output}, nil
}

// freshDir empties the client's own directory c.Dir/sub and returns it:
// a fetch never takes anything from an earlier fetch's cache or downloads.
func (c Client) freshDir(sub string) (string, error) {
	if c.Dir == "" {
		return "", errors.New("Client.Dir is empty: give the directory the client may write in")
	}
	return fixtureDir(c.Dir, sub)
}

// fixtureDir makes root/sub empty and returns it.
func fixtureDir(root, sub string) (string, error) {
	dir := filepath.Join(root, sub)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// toolOutput runs a build tool (not a client under test) and returns its
// stdout, with stderr in the error.
func toolOutput(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// baseEnv is the environment server programs start with: a PATH and nothing
// the test process happens to carry (proxy settings above all).
func baseEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{"PATH=" + path, "LANG=C.UTF-8"}
}
