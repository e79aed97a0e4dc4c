//go:build linux

package main

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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// sshHost is a test host running a real OpenSSH sshd that lets the controller's
// test key log in as root. Sessions get HOME=Home, so the agent installs under a
// test directory and never under the real home.
type sshHost struct {
	*testhosts.Host
	Listen  netip.Addr // where sshd listens
	Home    string     // the remote user's HOME for sessions
	HostPub string     // the host key, "type base64"
	// HostCA signed the host key's certificate (for the listen address),
	// which sshd offers beside the plain key: "type base64".
	HostCA string
	// UserCA is the private key of a CA whose user certificates for root
	// sshd accepts (TrustedUserCAKeys).
	UserCA string
	cmd    *exec.Cmd
	log    *lockedLog
}

// lockedLog keeps what a process prints while the test reads it.
type lockedLog = testhosts.LockedBuffer

// controller is the person's side: a HOME with ~/.ssh (key, config, known_hosts)
// and a records directory.
type controller struct {
	Home        string
	PosternHome string
	Key         string   // private key file
	Pub         string   // public key line
	Env         []string // more environment for postern, e.g. SSH_AUTH_SOCK
	// Dir is where postern is started: a directory of its own, neither
	// this source tree (a run started in a git work tree would take it
	// along, see workspace_e2e_test.go) nor the home (a local run refuses
	// to write there).
	Dir string
}

func newController(t testing.TB) *controller {
	t.Helper()
	c := &controller{Home: t.TempDir(), PosternHome: t.TempDir(), Dir: t.TempDir()}
	ssh := filepath.Join(c.Home, ".ssh")
	if err := os.MkdirAll(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	c.Key = filepath.Join(ssh, "id_ed25519")
	keygen(t, c.Key)
	pub, err := os.ReadFile(c.Key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	c.Pub = strings.TrimSpace(string(pub))
	return c
}

func keygen(t testing.TB, path string) {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "postern-test", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
}

func (c *controller) sshFile(name string) string { return filepath.Join(c.Home, ".ssh", name) }

// writeSSH writes a file under ~/.ssh.
func (c *controller) writeSSH(t testing.TB, name, content string) {
	t.Helper()
	if err := os.WriteFile(c.sshFile(name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// trust adds h's host key for addr (host or [host]:port) to known_hosts.
func (c *controller) trust(t testing.TB, addr, hostPub string) {
	t.Helper()
	f, err := os.OpenFile(c.sshFile("known_hosts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", addr, hostPub)
}

func (c *controller) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "POSTERN_HOME", "SSH_AUTH_SOCK", "POSTERN_AGENT_DIR":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+c.Home, "POSTERN_HOME="+c.PosternHome), c.Env...)
}

// postern runs the built binary as this controller.
func (c *controller) postern(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binFor(t), args...)
	cmd.Env = c.env()
	cmd.Dir = c.Dir
	return runToEnd(t, cmd)
}

// mustPostern runs postern and fails the test unless it exits 0.
func (c *controller) mustPostern(t testing.TB, args ...string) string {
	t.Helper()
	o, e, code := c.postern(t, args...)
	if code != 0 {
		t.Fatalf("postern %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, o, e)
	}
	return o
}

// startSSHD runs sshd inside h, listening on listen:22, letting pub log in as root.
func startSSHD(t testing.TB, h *testhosts.Host, listen netip.Addr, pub string) *sshHost {
	t.Helper()
	return startSSHDWith(t, h, listen, pub, sshdOptions{})
}

// sshdOptions change the test sshd's configuration.
type sshdOptions struct {
	NoSFTP bool     // no Subsystem sftp line: the remote has no sftp
	Env    []string // more NAME=VALUE for sessions (SetEnv)
}

func startSSHDWith(t testing.TB, h *testhosts.Host, listen netip.Addr, pub string, o sshdOptions) *sshHost {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatalf("OpenSSH sshd is needed for remote tests (apt-get install openssh-server): %v", err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &sshHost{Host: h, Listen: listen, Home: filepath.Join(dir, "home"), log: &lockedLog{}}
	if err := os.MkdirAll(s.Home, 0o755); err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, "host_ed25519")
	keygen(t, hostKey)
	b, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	s.HostPub = f[0] + " " + f[1]
	// A host certificate from a CA of the test's, for known_hosts
	// @cert-authority lines.
	ca := filepath.Join(dir, "host_ca")
	keygen(t, ca)
	if out, err := exec.Command("ssh-keygen", "-q", "-s", ca, "-I", "postern-test-host", "-h", "-n", listen.String(), hostKey+".pub").CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -s: %v: %s", err, out)
	}
	if b, err = os.ReadFile(ca + ".pub"); err != nil {
		t.Fatal(err)
	}
	f = strings.Fields(string(b))
	s.HostCA = f[0] + " " + f[1]
	s.UserCA = filepath.Join(dir, "user_ca")
	keygen(t, s.UserCA)
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "sshd_config")
	cfg := fmt.Sprintf(`ListenAddress %s:22
HostKey %s
HostCertificate %s-cert.pub
TrustedUserCAKeys %s.pub
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
Subsystem sftp internal-sftp
SetEnv HOME=%s
PrintMotd no
LogLevel ERROR
`, listen, hostKey, hostKey, s.UserCA, filepath.Join(dir, "sshd.pid"), auth, s.Home)
	if o.NoSFTP {
		cfg = strings.Replace(cfg, "Subsystem sftp internal-sftp\n", "", 1)
	}
	if len(o.Env) > 0 {
		cfg = strings.Replace(cfg, "SetEnv HOME="+s.Home, "SetEnv HOME="+s.Home+" "+strings.Join(o.Env, " "), 1)
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = h.Command(context.Background(), "/usr/sbin/sshd", "-D", "-e", "-f", conf)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { s.cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		// Sessions outlive the listener, and a session whose client went
		// silent would linger for minutes holding sshd's log pipe.
		for _, pid := range sshdTree(s.cmd.Process.Pid)[1:] {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("sshd on %s:\n%s", h.Name, s.log.String())
		}
	})
	// Wait until sshd accepts: from the root namespace when it listens on the
	// host's own address, else from inside the host.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c net.Conn
		var err error
		if listen == h.Addr {
			c, err = net.DialTimeout("tcp", netip.AddrPortFrom(listen, 22).String(), time.Second)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err = h.Dial(ctx, netip.AddrPortFrom(listen, 22).String())
			cancel()
		}
		if err == nil {
			c.Close()
			return s
		}
		select {
		case <-waited:
			t.Fatalf("sshd exited: %s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd did not listen on %s:22 within 10s: %v\n%s", listen, err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agentFiles lists the installed agents under a remote home.
func agentFiles(t testing.TB, home string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(home, ".cache", "postern", "agents", "*", "postern"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// remoteLab is a remote machine running sshd, and an upstream web server that
// only the remote can reach, over a link of their own.
type remoteLab struct {
	Lab      *testhosts.Lab
	Remote   *sshHost
	Upstream *testhosts.Host
	Link     *testhosts.HostLink
	Web      *testhosts.Server
	DNS      *testhosts.RecordingDNS
	C        *controller
}

func newRemoteLab(t testing.TB) *remoteLab {
	t.Helper()
	return newRemoteLabWith(t, sshdOptions{})
}

func newRemoteLabWith(t testing.TB, o sshdOptions) *remoteLab {
	t.Helper()
	lab := testhosts.NewTestLab(t, "remote")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &remoteLab{Lab: lab, C: newController(t)}
	remote, err := lab.Host(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	if r.Upstream, err = lab.Host(ctx, "upstream"); err != nil {
		t.Fatal(err)
	}
	if r.Link, err = lab.Link(ctx, remote, r.Upstream); err != nil {
		t.Fatal(err)
	}
	if r.Web, err = r.Upstream.ServeHTTPAt(r.Link.AddrB, 80, nil); err != nil {
		t.Fatal(err)
	}
	// The door on the remote asks this server (on the remote itself) for names.
	if r.DNS, err = remote.ServeDNS(53, map[string][]netip.Addr{"upstream.test": {r.Link.AddrB}}); err != nil {
		t.Fatal(err)
	}
	r.Remote = startSSHDWith(t, remote, remote.Addr, r.C.Pub, o)
	return r
}

// policy allows upstream.test on port 80 and the link's /24 it lives in.
func (r *remoteLab) policy(t testing.TB) string {
	p := filepath.Join(t.TempDir(), "remote-policy.hcl")
	src := fmt.Sprintf(`
mode        = "enforce"
ports       = [80]
allow       = ["upstream.test"]
allow_cidrs = ["%s"]
`, r.Link.Prefix)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *remoteLab) resolver() string { return netip.AddrPortFrom(r.Remote.Addr, 53).String() }

// addAndProbe adds the remote as name through an ssh config alias and measures it.
func (r *remoteLab) addAndProbe(t testing.TB, name string) {
	t.Helper()
	r.C.writeSSH(t, "config", fmt.Sprintf("Host %s-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n", name, r.Remote.Addr))
	r.C.trust(t, r.Remote.Addr.String(), r.Remote.HostPub)
	r.C.mustPostern(t, "machine", "add", name, "--ssh", name+"-alias")
	r.C.mustPostern(t, "machine", "probe-confinement", name)
}

func lastRun(t testing.TB, c *controller) records.Run {
	t.Helper()
	out := c.mustPostern(t, "runs", "list", "--json")
	var rs []records.Run
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("runs list --json: %v: %s", err, out)
	}
	if len(rs) == 0 {
		t.Fatal("no runs recorded")
	}
	return rs[len(rs)-1]
}

func TestRemoteUnmeasuredIsRefused(t *testing.T) {
	testhosts.EndToEnd(t)
	c := newController(t)
	c.mustPostern(t, "machine", "add", "far", "--ssh", "root@10.255.255.1")
	_, stderr, code := c.postern(t, "run", "--machine", "far", "--", "true")
	if code != exitRefused || !strings.Contains(stderr, "EGRESS-CLOSED-DEFAULT-REFUSED") || !strings.Contains(stderr, "remote-linux") {
		t.Fatalf("run on an unmeasured remote: exit %d, stderr %q; want 77 with the marker and lane remote-linux", code, stderr)
	}
}

func TestRemoteRunReachesUpstreamThroughItsDoor(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	show := r.C.mustPostern(t, "machine", "show", "far", "--json")
	if !strings.Contains(show, `"carry": "network-wall"`) || !strings.Contains(show, `"lane": "remote-linux"`) {
		t.Fatalf("machine show after probing: %s", show)
	}
	if len(agentFiles(t, r.Remote.Home)) != 1 {
		t.Fatalf("agent not installed under the remote's ~/.cache/postern/agents: %v", agentFiles(t, r.Remote.Home))
	}

	// The upstream listens only on its link to the remote: the root namespace
	// has no route there (nothing here dials it, so no packet can leave by the
	// default route). The echo below shows who the upstream saw.
	pol := r.policy(t)
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--",
		"curl", "-sS", "--max-time", "10", "http://upstream.test/")
	if code != 0 {
		t.Fatalf("remote run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep testhosts.EchoReply
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.ServedBy != "upstream" || rep.Host != "upstream.test" {
		t.Fatalf("remote run's curl got %q (%v); want an echo from upstream for upstream.test", stdout, err)
	}
	// The upstream saw the remote's link address: the door ran on the remote.
	if !strings.HasPrefix(rep.Remote, r.Link.AddrA.String()+":") {
		t.Fatalf("upstream saw the client %s, want the remote's link address %s", rep.Remote, r.Link.AddrA)
	}
	run := lastRun(t, r.C)
	if run.Machine != "far" || run.Lane != "remote-linux" || run.Carry != "network-wall" || run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 0 || run.Allowed == 0 {
		t.Fatalf("run record: %+v", run)
	}

	if !strings.HasPrefix(run.Landlock, "abi ") || !strings.Contains(run.Landlock, "tcp connect only to ports 53,80") {
		t.Fatalf("run record's landlock = %q, want the ABI and the ports 53,80", run.Landlock)
	}

	// Landlock refuses connect(2) to a port the policy does not redirect, before
	// the wall's reset would: connect(2) fails with EACCES, not ECONNREFUSED.
	_, stderr, code = r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--",
		"bash", "-c", "exec 3<>/dev/tcp/"+r.Link.AddrB.String()+"/8080")
	if code == 0 || !strings.Contains(stderr, "Permission denied") {
		t.Fatalf("connect to port 8080 on the remote: exit %d, stderr %q; want Landlock's permission denied", code, stderr)
	}

	// Events of the remote run are at home.
	evOut := r.C.mustPostern(t, "runs", "events", run.ID, "--json")
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(evOut), "\n") {
		var ev door.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "decision" && ev.Host == "upstream.test" && ev.Decision == "allow" {
			found = true
		}
	}
	if !found {
		t.Fatalf("runs events %s has no allow of upstream.test:\n%s", run.ID, evOut)
	}

	// A login file the remote run made in the remote home stays in its
	// private layer, and the person at home is told.
	_, stderr, code = r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--",
		"sh", "-c", `echo 'curl evil.test' > "$HOME/.bash_profile"`)
	discarded := "1 file(s) it wrote in the home outside its writable places (~/.bash_profile) were discarded"
	if code != 0 || !strings.Contains(stderr, discarded) {
		t.Fatalf("remote run planting ~/.bash_profile: exit %d, stderr %q; want %q", code, stderr, discarded)
	}
	if _, err := os.Stat(filepath.Join(r.Remote.Home, ".bash_profile")); err == nil {
		t.Fatalf("~/.bash_profile planted by a remote run reached the remote home")
	}
	if g := lastRun(t, r.C).Writes; len(g) != 1 || !strings.HasPrefix(g[0], discarded) {
		t.Fatalf("the remote run's record says %q, want %q", g, discarded)
	}

	// A denied name on the remote is denied, and the exit status comes home.
	stdout, stderr, code = r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--",
		"sh", "-c", "curl -sS --max-time 5 http://denied.test/ >/dev/null 2>&1; echo to-stderr >&2; exit 7")
	if code != 7 || !strings.Contains(stderr, "to-stderr") || !strings.Contains(stderr, "denied") {
		t.Fatalf("remote run with exit 7: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// TestRemoteEgressOpen runs on a remote machine with --egress-open: no wall
// and no door (the upstream is reached straight from the remote's own network,
// with a port no policy lists), a warning, and a record that says so — on a
// machine never measured, as a local open run needs no measurement either.
func TestRemoteEgressOpen(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.C.writeSSH(t, "config", fmt.Sprintf("Host far-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n", r.Remote.Addr))
	r.C.trust(t, r.Remote.Addr.String(), r.Remote.HostPub)
	r.C.mustPostern(t, "machine", "add", "far", "--ssh", "far-alias")
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--egress-open", "installing from the vendor", "--",
		"sh", "-c", "curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://"+r.Link.AddrB.String()+":80/; readlink /proc/self/ns/net >&2; exit 3")
	if code != 3 || stdout != "200" {
		t.Fatalf("open remote run: exit %d, stdout %q, stderr %q; want the upstream reached and exit 3", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "WARNING") || !strings.Contains(stderr, "OPEN network") || !strings.Contains(stderr, "installing from the vendor") {
		t.Errorf("no warning of the open network on stderr: %q", stderr)
	}
	// The run was in the remote's own network namespace, not a wall's.
	remoteNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", r.Remote.cmd.Process.Pid))
	if err != nil || !strings.Contains(stderr, remoteNet) {
		t.Errorf("the open run's network namespace (stderr %q) is not the remote's own (%s, %v)", stderr, remoteNet, err)
	}
	run := lastRun(t, r.C)
	if run.Carry != "none" || run.EgressOpenReason != "installing from the vendor" || run.State != records.StateExited ||
		run.ExitCode == nil || *run.ExitCode != 3 || !strings.Contains(run.Landlock, "open network") {
		t.Fatalf("run record: %+v", run)
	}
	if evs := r.C.mustPostern(t, "runs", "events", run.ID, "--json"); strings.TrimSpace(evs) != "" {
		t.Errorf("an open run has door events:\n%s", evs)
	}
}

func TestRemoteAgentReusedAndReinstalledWhenDamaged(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	files := agentFiles(t, r.Remote.Home)
	if len(files) != 1 {
		t.Fatalf("installed agents after probing: %v", files)
	}
	st1, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if o := r.C.mustPostern(t, "run", "--machine", "far", "--", "echo", "one"); o != "one\n" {
		t.Fatalf("first run printed %q", o)
	}
	st2, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(st1, st2) || !st1.ModTime().Equal(st2.ModTime()) {
		t.Fatalf("the agent was installed again although it was in place")
	}
	// The agent remembers its hash beside itself, for the file as it is.
	cache, err := os.ReadFile(filepath.Join(filepath.Dir(files[0]), "postern.sha256"))
	if err != nil || !strings.Contains(string(cache), filepath.Base(filepath.Dir(files[0]))) {
		t.Fatalf("the agent's hash cache: %q, %v", cache, err)
	}

	// Damage the agent: the next run installs it again and still works.
	f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("damaged!"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if o, e, code := r.C.postern(t, "run", "--machine", "far", "--", "echo", "two"); code != 0 || o != "two\n" {
		t.Fatalf("run after damaging the agent: exit %d, stdout %q, stderr %q", code, o, e)
	}
	st3, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st2, st3) {
		t.Fatal("the damaged agent was not replaced")
	}
	want := filepath.Base(filepath.Dir(files[0]))
	if got := sha256File(t, files[0]); got != want {
		t.Fatalf("reinstalled agent hashes to %s, want %s", got, want)
	}
	// Truncated to nothing: installed again too.
	if err := os.Truncate(files[0], 0); err != nil {
		t.Fatal(err)
	}
	if o, e, code := r.C.postern(t, "run", "--machine", "far", "--", "echo", "three"); code != 0 || o != "three\n" {
		t.Fatalf("run after truncating the agent: exit %d, stdout %q, stderr %q", code, o, e)
	}
}

func sha256File(t testing.TB, p string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[0]
}

func TestRemoteHostKeys(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	c := r.C
	addr := r.Remote.Addr.String()
	c.mustPostern(t, "machine", "add", "far", "--ssh", "root@"+addr)

	// Unknown: refused, naming the host, the offered fingerprint and the fix.
	fp := fingerprint(t, r.Remote.HostPub)
	_, stderr, code := c.postern(t, "machine", "probe-confinement", "far")
	if code == 0 || !strings.Contains(stderr, "unknown") || !strings.Contains(stderr, fp) || !strings.Contains(stderr, addr) || !strings.Contains(stderr, "ssh-keyscan") {
		t.Fatalf("unknown host key: exit %d, stderr %q; want a refusal naming %s, %s and the fix", code, stderr, addr, fp)
	}

	// Changed: another key on file for the address is refused, even with trust on first use.
	other := filepath.Join(t.TempDir(), "other")
	keygen(t, other)
	ob, _ := os.ReadFile(other + ".pub")
	of := strings.Fields(string(ob))
	c.trust(t, addr, of[0]+" "+of[1])
	_, stderr, code = c.postern(t, "machine", "probe-confinement", "far", "--trust-new-host-key")
	if code == 0 || !strings.Contains(stderr, "CHANGED") || !strings.Contains(stderr, fp) || !strings.Contains(stderr, "ssh-keygen -R") {
		t.Fatalf("changed host key: exit %d, stderr %q", code, stderr)
	}

	// Trust on first use, only when asked: the key is recorded and used next time.
	if err := os.Remove(c.sshFile("known_hosts")); err != nil {
		t.Fatal(err)
	}
	c.mustPostern(t, "machine", "probe-confinement", "far", "--trust-new-host-key")
	kh, err := os.ReadFile(c.sshFile("known_hosts"))
	if err != nil || !strings.Contains(string(kh), strings.Fields(r.Remote.HostPub)[1]) {
		t.Fatalf("known_hosts after trusting on first use: %q, %v", kh, err)
	}
	c.mustPostern(t, "machine", "probe-confinement", "far")

	// HostKeyAlias: known_hosts knows the machine by the alias only.
	c.writeSSH(t, "known_hosts", "fleet-far "+r.Remote.HostPub+"\n")
	c.writeSSH(t, "config", "Host "+addr+"\n  HostKeyAlias fleet-far\n")
	c.mustPostern(t, "machine", "probe-confinement", "far")
	c.writeSSH(t, "config", "")
	if _, stderr, code = c.postern(t, "machine", "probe-confinement", "far"); code == 0 || !strings.Contains(stderr, "unknown") {
		t.Fatalf("without the alias the key on file under it does not vouch for %s: exit %d, %q", addr, code, stderr)
	}

	// A host certificate signed by a CA that known_hosts trusts for the
	// address, with no key of the host's own on file.
	c.writeSSH(t, "known_hosts", "@cert-authority "+addr+" "+r.Remote.HostCA+"\n")
	c.mustPostern(t, "machine", "probe-confinement", "far")
	// The same CA trusted for other names only vouches for nothing here.
	c.writeSSH(t, "known_hosts", "@cert-authority *.example.test "+r.Remote.HostCA+"\n")
	if _, stderr, code = c.postern(t, "machine", "probe-confinement", "far"); code == 0 || !strings.Contains(stderr, "host key") {
		t.Fatalf("a CA trusted for other names: exit %d, %q", code, stderr)
	}
}

// TestRemoteUserCertificate logs in with a key sshd knows only through the
// certificate its CA signed, found beside the identity file as ssh finds it.
func TestRemoteUserCertificate(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	c := r.C
	addr := r.Remote.Addr.String()
	key := c.sshFile("id_cert")
	keygen(t, key)
	c.writeSSH(t, "config", "Host "+addr+"\n  IdentityFile ~/.ssh/id_cert\n  IdentitiesOnly yes\n")
	c.trust(t, addr, r.Remote.HostPub)
	c.mustPostern(t, "machine", "add", "far", "--ssh", "root@"+addr)
	// Not in authorized_keys, no certificate: refused.
	if _, stderr, code := c.postern(t, "machine", "probe-confinement", "far"); code == 0 || !strings.Contains(stderr, "unable to authenticate") {
		t.Fatalf("a key sshd does not know: exit %d, %q", code, stderr)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-s", r.Remote.UserCA, "-I", "postern-test-user", "-n", "root", key+".pub").CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -s: %v: %s", err, out)
	}
	c.mustPostern(t, "machine", "probe-confinement", "far")
}

func fingerprint(t testing.TB, pub string) string {
	t.Helper()
	cmd := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", "-")
	cmd.Stdin = strings.NewReader(pub + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[1]
}

// jumpLab is a target sshd reachable only through a jump host: it listens on
// the target's link to the jump host alone.
type jumpLab struct {
	C          *controller
	Jump       *testhosts.Host
	JumpSSHD   *sshHost
	Target     *sshHost
	TargetAddr netip.Addr
}

func newJumpLab(t *testing.T, name string) *jumpLab {
	lab := testhosts.NewTestLab(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newController(t)
	jh, err := lab.Host(ctx, "jump")
	if err != nil {
		t.Fatal(err)
	}
	th, err := lab.Host(ctx, "target")
	if err != nil {
		t.Fatal(err)
	}
	link, err := lab.Link(ctx, jh, th)
	if err != nil {
		t.Fatal(err)
	}
	jump := startSSHD(t, jh, jh.Addr, c.Pub)
	target := startSSHD(t, th, link.AddrB, c.Pub)
	c.trust(t, jh.Addr.String(), jump.HostPub)
	c.trust(t, link.AddrB.String(), target.HostPub)
	return &jumpLab{C: c, Jump: jh, JumpSSHD: jump, Target: target, TargetAddr: link.AddrB}
}

func TestRemoteProxyJump(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newJumpLab(t, "jump")
	c := l.C
	c.writeSSH(t, "config", fmt.Sprintf(`Include conf.d/*
Host bastion
  HostName %s
  User root
`, l.Jump.Addr))
	if err := os.MkdirAll(c.sshFile("conf.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	c.writeSSH(t, "conf.d/inner", fmt.Sprintf("Host inner\n  HostName %s\n  User root\n  ProxyJump bastion\n", l.TargetAddr))
	c.mustPostern(t, "machine", "add", "inner", "--ssh", "inner")
	c.mustPostern(t, "machine", "probe-confinement", "inner")
	if o := c.mustPostern(t, "run", "--machine", "inner", "--", "cat", "/proc/sys/kernel/hostname"); strings.TrimSpace(o) == "" {
		t.Fatalf("run through the jump host printed nothing")
	}
	if len(agentFiles(t, l.Target.Home)) != 1 {
		t.Fatalf("the agent was not installed on the target behind the jump host")
	}
}

// TestRemoteProxyCommand reaches a target that only the jump host's network
// can reach through a ProxyCommand run in that network (socat carrying the
// ssh stream), as a bastion or a cloud's session manager would: the machine is
// probed, runs there, and a ProxyCommand that fails says why in its own words.
func TestRemoteProxyCommand(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newJumpLab(t, "pcmd")
	c := l.C
	c.writeSSH(t, "config", fmt.Sprintf(`Host behind
  HostName %s
  User root
  ProxyCommand ip netns exec %s socat - TCP:%%h:%%p
Host broken
  HostName %s
  User root
  ProxyCommand sh -c 'echo "bastion says: no route to %%h" >&2; exit 3'
`, l.TargetAddr, l.Jump.NetNS, l.TargetAddr))
	c.mustPostern(t, "machine", "add", "behind", "--ssh", "behind")
	c.mustPostern(t, "machine", "probe-confinement", "behind")
	if o := c.mustPostern(t, "run", "--machine", "behind", "--", "cat", "/proc/sys/kernel/hostname"); strings.TrimSpace(o) == "" {
		t.Fatalf("run through the ProxyCommand printed nothing")
	}
	if len(agentFiles(t, l.Target.Home)) != 1 {
		t.Fatalf("the agent was not installed on the target behind the ProxyCommand")
	}
	if pgrep(t, "socat - TCP:") {
		t.Errorf("a ProxyCommand is still running after postern returned")
	}

	c.mustPostern(t, "machine", "add", "broken", "--ssh", "broken")
	o, e, code := c.postern(t, "machine", "probe-confinement", "broken")
	out := o + e
	if code == 0 || !strings.Contains(out, "ProxyCommand") || !strings.Contains(out, "bastion says: no route to "+l.TargetAddr.String()) ||
		!strings.Contains(out, "exit status 3") {
		t.Fatalf("probe through a failing ProxyCommand: exit %d\n%s", code, out)
	}
}

func TestRemoteControllerKilledLeavesNothing(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	// sleep takes 300.NNNNNN: a number that names this run alone.
	marker := fmt.Sprintf("%03d%03d", time.Now().UnixNano()%1000, os.Getpid()%1000)
	cmd := exec.Command(binFor(t), "run", "--machine", "far", "--", "sleep", "300."+marker)
	cmd.Env = r.C.env()
	cmd.Dir = r.C.Dir // not this source tree, which a remote run would take along
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pattern := "^(\\S*/)?sleep 300." + marker + "$" // the run itself, not the controller whose arguments name it
	var pids []int
	waitUntil(t, 20*time.Second, "the remote run to start", func() bool { pids = pgrepPids(t, pattern); return len(pids) > 0 })
	namespaces := runNamespaces(t, pids[0], r.Remote.cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	killed, killedTicks := time.Now(), sinceBoot(t)
	waitUntil(t, 5*time.Second, "the remote run to be gone after the controller was killed", func() bool { return !pgrep(t, pattern) })
	waitUntil(t, 5*time.Second-time.Since(killed), "nothing to hold the run's namespaces", func() bool { return len(nsHolders(namespaces, killedTicks)) == 0 })
	t.Logf("remote run and its namespaces gone %s after the controller was killed", time.Since(killed).Round(time.Millisecond))
	waitUntil(t, 5*time.Second, "the agent to be gone", func() bool { return !pgrep(t, "__agent serve") })
	run := lastRun(t, r.C)
	if run.State != records.StateLost {
		t.Fatalf("run after the controller was killed: state %q, want lost", run.State)
	}
}

func pgrep(t testing.TB, pattern string) bool {
	t.Helper()
	err := exec.Command("pgrep", "-f", pattern).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false
	}
	if err != nil {
		t.Fatalf("pgrep: %v", err)
	}
	return true
}

func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A run (or anyone) that swaps the remote agent for a script that execs the
// real one: the controller checks the file over sftp before starting it, so
// the script is never run; the agent is installed again and the person told.
func TestRemoteAgentSwappedIsNotRun(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	files := agentFiles(t, r.Remote.Home)
	if len(files) != 1 {
		t.Fatalf("installed agents after probing: %v", files)
	}
	agentPath := files[0]
	hash := filepath.Base(filepath.Dir(agentPath))
	real := filepath.Join(r.Remote.Home, "real-postern")
	if err := testhosts.CopyExecutable(agentPath, real); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(r.Remote.Home, "script-ran")
	script := "#!/bin/sh\necho ran >> " + marker + "\nexec " + real + " \"$@\"\n"
	orig, err := os.Stat(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	// What the controller measured of the file at install, over sftp.
	var view struct {
		Agents []agent.FileState `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.C.mustPostern(t, "machine", "show", "far", "--json")), &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Agents) != 1 || view.Agents[0].Path != agentPath || view.Agents[0].Hash != hash || view.Agents[0].Size != orig.Size() ||
		view.Agents[0].Mtime != orig.ModTime().Unix() || !os.FileMode(view.Agents[0].Mode).IsRegular() {
		t.Fatalf("recorded agents %+v; want %s, %d bytes, modified %d", view.Agents, agentPath, orig.Size(), orig.ModTime().Unix())
	}
	for _, v := range []struct {
		name    string
		content func() []byte
		sameAge bool   // the script gets the agent's modification time
		what    string // in the warning
	}{
		{"a script", func() []byte { return []byte(script) }, false, "size "},
		{"a script of the agent's size and time", func() []byte {
			b := []byte(script + "#")
			b = append(b, bytes.Repeat([]byte("x"), int(orig.Size())-len(b)-1)...)
			return append(b, '\n')
		}, true, "content differs from the agent's at offset"},
	} {
		t.Run(v.name, func(t *testing.T) {
			// Swapped as a run would: a new file renamed over the agent.
			tmp := agentPath + ".swap"
			if err := os.WriteFile(tmp, v.content(), 0o700); err != nil {
				t.Fatal(err)
			}
			if v.sameAge {
				if err := os.Chtimes(tmp, orig.ModTime(), orig.ModTime()); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Rename(tmp, agentPath); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--", "echo", "two")
			if code != 0 || stdout != "two\n" {
				t.Fatalf("run after the swap: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the script at the agent's path was run")
			}
			want := "postern: agent on far: " + agentPath + " was changed since install ("
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, v.what) || !strings.Contains(stderr, "); reinstalled\n") {
				t.Fatalf("stderr %q: want %q naming %q and that it was reinstalled", stderr, want, v.what)
			}
			if got := sha256File(t, agentPath); got != hash {
				t.Fatalf("the agent's path hashes to %s after the run, want %s", got, hash)
			}
			t.Logf("run that found and replaced the swapped agent: %s", time.Since(start).Round(time.Millisecond))
			// The next run finds the agent as recorded: no warning.
			start = time.Now()
			if _, stderr, code := r.C.postern(t, "run", "--machine", "far", "--", "true"); code != 0 || strings.Contains(stderr, "changed since install") {
				t.Fatalf("the run after: exit %d, stderr %q", code, stderr)
			}
			t.Logf("warm run with the agent checked over sftp: %s", time.Since(start).Round(time.Millisecond))
			var err error
			if orig, err = os.Stat(agentPath); err != nil {
				t.Fatal(err)
			}
		})
	}
}
