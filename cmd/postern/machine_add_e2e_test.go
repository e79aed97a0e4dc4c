//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// inHost runs postern as c inside h's network namespace. There 'ip netns exec'
// puts /etc/netns/NETNS/resolv.conf over /etc/resolv.conf, so the name
// lookups postern makes go to the test's DNS server and nowhere else.
func (c *controller) inHost(t testing.TB, h *testhosts.Host, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := h.Command(ctx, binFor(t), args...)
	cmd.Env = c.env()
	return runToEnd(t, cmd)
}

// hostResolver points the name lookups of commands run in h at dns, for the
// test's life.
func hostResolver(t testing.TB, h *testhosts.Host, dns netip.Addr) {
	t.Helper()
	dir := filepath.Join("/etc/netns", h.NetNS)
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists already", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+dns.String()+"\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func machineNames(t testing.TB, c *controller, h *testhosts.Host) []string {
	t.Helper()
	o, e, code := c.inHost(t, h, "machine", "list", "--json")
	if code != 0 {
		t.Fatalf("machine list: exit %d: %s", code, e)
	}
	var vs []machineView
	if err := json.Unmarshal([]byte(o), &vs); err != nil {
		t.Fatalf("machine list --json: %v: %s", err, o)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	return names
}

// machine add checks that its ssh destination names a host, by the ssh config
// and, for a plain name, a lookup; --check also logs in with OpenSSH's sshd.
func TestMachineAddChecksDestination(t *testing.T) {
	lab := testhosts.NewTestLab(t, "madd")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	remote, err := lab.Host(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	dns, err := remote.ServeDNS(53, map[string][]netip.Addr{"known.test": {remote.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	hostResolver(t, remote, remote.Addr)
	c := newController(t)
	sshd := startSSHD(t, remote, remote.Addr, c.Pub)
	c.writeSSH(t, "config", fmt.Sprintf(`Host good-alias
  HostName %[1]s
  User root
  IdentityFile ~/.ssh/id_ed25519
Host dead-alias
  HostName %[1]s
  Port 2222
  User root
Host jumped
  ProxyJump good-alias
`, remote.Addr))
	c.trust(t, remote.Addr.String(), sshd.HostPub)
	configFile := c.sshFile("config")

	// An alias the config does not have, and no name resolves: refused as
	// bad input, naming the config file and what to write.
	_, e, code := c.inHost(t, remote, "machine", "add", "m1", "--ssh", "typo-alias")
	if code != 2 || !strings.Contains(e, "resolves to nothing") || !strings.Contains(e, `"typo-alias" is not a Host in `+configFile) ||
		!strings.Contains(e, "add 'Host typo-alias'") {
		t.Fatalf("unknown alias: exit %d, stderr:\n%s", code, e)
	}
	if !dns.Asked("typo-alias") {
		t.Fatalf("the name was not looked up with the test's DNS server: %v", dns.Queries())
	}
	// An alias with its HostName, a name that resolves, and a host behind a
	// jump host (resolved beyond it) are added; so is an address.
	for _, tc := range []struct{ name, dest, want string }{
		{"m2", "good-alias", "root@" + remote.Addr.String() + " port 22"},
		{"m3", "root@known.test", "root@known.test at " + remote.Addr.String() + " port 22"},
		{"m4", "jumped", "jumped through its proxy"},
		{"m5", "root@" + remote.Addr.String() + ":2200", "root@" + remote.Addr.String() + " port 2200"},
	} {
		o, e, code := c.inHost(t, remote, "machine", "add", tc.name, "--ssh", tc.dest)
		if code != 0 || !strings.Contains(o, tc.want) {
			t.Fatalf("add %s --ssh %s: exit %d, want %q in stdout:\n%s%s", tc.name, tc.dest, code, tc.want, o, e)
		}
	}
	// --check logs in for real.
	o, e, code := c.inHost(t, remote, "machine", "add", "m6", "--ssh", "good-alias", "--check")
	if code != 0 || !strings.Contains(o, "logged in") {
		t.Fatalf("add --check: exit %d:\n%s%s", code, o, e)
	}
	// A host where nothing answers on the port: resolved, but --check fails
	// to connect; a failure of postern's (1), and nothing is added.
	o, e, code = c.inHost(t, remote, "machine", "add", "m7", "--ssh", "dead-alias", "--check", "--connect-timeout", "3s")
	if code != 1 || !strings.Contains(e, "connection refused") || !strings.Contains(e, "not added") {
		t.Fatalf("add --check to a closed port: exit %d:\n%s%s", code, o, e)
	}
	// A host key known_hosts does not have: --check refuses it.
	if err := os.Remove(c.sshFile("known_hosts")); err != nil {
		t.Fatal(err)
	}
	_, e, code = c.inHost(t, remote, "machine", "add", "m8", "--ssh", "good-alias", "--check")
	if code != 1 || !strings.Contains(e, "trust-new-host-key") {
		t.Fatalf("add --check with an unknown host key: exit %d:\n%s", code, e)
	}
	got := strings.Join(machineNames(t, c, remote), ",")
	if want := "local,m2,m3,m4,m5,m6"; got != want {
		t.Fatalf("machines %s, want %s", got, want)
	}
}
