//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeConfig writes $XDG_CONFIG_HOME/postern/config.hcl for c.
func (c *controller) writeConfig(t testing.TB, src string) string {
	t.Helper()
	dir := filepath.Join(c.Home, "xdg-config")
	if err := os.MkdirAll(filepath.Join(dir, "postern"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "postern", "config.hcl")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Env = append(c.Env, "XDG_CONFIG_HOME="+dir)
	return p
}

// The config file gives run its default machine and policy, the ssh config
// read and the connect timeout; flags win; a bad file is refused with its
// file:line:col.
func TestConfigFileDefaults(t *testing.T) {
	c := newController(t)
	pol := filepath.Join(t.TempDir(), "p.hcl")
	if err := os.WriteFile(pol, []byte("mode = \"enforce\"\nports = [443]\nallow = [\"example.test\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sshConf := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(sshConf, []byte("Host from-config\n  HostName 10.250.0.9\n  User root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without the config file, the alias is unknown.
	if _, e, code := c.postern(t, "machine", "add", "cfg", "--ssh", "from-config"); code != 2 || !strings.Contains(e, "resolves to nothing") {
		t.Fatalf("add without the config file: exit %d: %s", code, e)
	}
	cfgFile := c.writeConfig(t, `
machine         = "cfg"
policy          = "`+pol+`"
connect_timeout = "7s"
ssh {
  config = "`+sshConf+`"
}
`)
	if o, e, code := c.postern(t, "machine", "add", "cfg", "--ssh", "from-config"); code != 0 || !strings.Contains(o, "root@10.250.0.9") {
		t.Fatalf("add with the config file's ssh config: exit %d: %s%s", code, o, e)
	}
	// A run with no --machine and no --policy: the config file's (cfg is
	// unmeasured, so the run is refused and recorded).
	if _, e, code := c.postern(t, "run", "--", "true"); code != 77 {
		t.Fatalf("run with the config's defaults: exit %d: %s", code, e)
	}
	if r := lastRun(t, c); r.Machine != "cfg" || r.Policy != pol {
		t.Fatalf("run record: machine %q policy %q, want cfg and %s", r.Machine, r.Policy, pol)
	}
	// Flags win.
	other := filepath.Join(t.TempDir(), "other.hcl")
	if err := os.WriteFile(other, []byte("mode = \"enforce\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := c.postern(t, "run", "--machine", "local", "--policy", other, "--", "true"); code != 77 {
		t.Fatalf("run with flags: exit %d: %s", code, e)
	}
	if r := lastRun(t, c); r.Machine != "local" || r.Policy != other {
		t.Fatalf("run record with flags: machine %q policy %q", r.Machine, r.Policy)
	}
	// The connect timeout: a host behind a proxy that never answers (no
	// network involved) fails --check after the config's 1s, not 15s.
	if err := os.WriteFile(cfgFile, []byte("connect_timeout = \"1s\"\nssh {\n  config = \""+sshConf+"\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sshConf, []byte("Host silent\n  User root\n  ProxyCommand sleep 30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, e, code := c.postern(t, "machine", "add", "silent", "--ssh", "silent", "--check")
	if took := time.Since(start); code != 1 || took > 8*time.Second || took < time.Second {
		t.Fatalf("add --check of a silent host: exit %d after %s: %s", code, took, e)
	}
	// A setting misspelt: every command refuses, naming file:line:col.
	if err := os.WriteFile(cfgFile, []byte("machine = \"cfg\"\npolcy = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, code = c.postern(t, "machine", "list")
	if code != 2 || !strings.Contains(e, cfgFile+`:2:1: Unsupported argument: An argument named "polcy" is not expected here. Did you mean "policy"?`) {
		t.Fatalf("bad config: exit %d: %s", code, e)
	}
}
