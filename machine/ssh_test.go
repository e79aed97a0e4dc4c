package machine

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseDest(t *testing.T) {
	for in, want := range map[string]Dest{
		"gpu1":                 {Host: "gpu1"},
		"me@gpu1":              {User: "me", Host: "gpu1"},
		"me@10.0.0.1:2222":     {User: "me", Host: "10.0.0.1", Port: 2222},
		"[2001:db8::1]:22":     {Host: "2001:db8::1", Port: 22},
		"root@[2001:db8::1]":   {User: "root", Host: "2001:db8::1"},
		"2001:db8::1":          {Host: "2001:db8::1"},
		"ssh://a@b.example:23": {User: "a", Host: "b.example", Port: 23},
	} {
		got, err := ParseDest(in)
		if err != nil || got != want {
			t.Errorf("ParseDest(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "@host", "me@", "host:0", "host:99999", "host:x", "a b", "[::1", "h/x"} {
		if _, err := ParseDest(in); !errors.Is(err, ErrBadDest) {
			t.Errorf("ParseDest(%q) = %v, want ErrBadDest", in, err)
		}
	}
}

func TestSSHConfigLookup(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	inc := "Host inc\n  HostName 10.9.9.9\n  ProxyJump bastion\n"
	if err := os.WriteFile(filepath.Join(dir, "conf.d", "x.conf"), []byte(inc), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `
# comment
Include conf.d/*.conf
Host gpu1 gpu2
  HostName %h.lab.example
  User alice
  Port 2222
  IdentityFile ~/.ssh/gpu_key
  IdentitiesOnly yes

Host *.lab !secret.lab
  User=bob
  ServerAliveInterval 5

Host aliased
  HostName 10.1.1.1
  HostKeyAlias fleet.lab
  CertificateFile ~/.ssh/fleet-cert.pub

Match host nothing
  User never

Host *
  User fallback
  IdentityFile "~/.ssh/id %r"
  UserKnownHostsFile ~/.ssh/kh
`
	c, err := ParseSSHConfig("config", []byte(src), dir)
	if err != nil {
		t.Fatal(err)
	}
	g := c.Lookup("gpu1")
	want := SSHHost{Alias: "gpu1", HostName: "gpu1.lab.example", User: "alice", Port: 2222,
		IdentityFiles: []string{"~/.ssh/gpu_key", "~/.ssh/id %r"}, IdentitiesOnly: true, UserKnownHostsFiles: []string{"~/.ssh/kh"}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("Lookup(gpu1) =\n%+v\nwant\n%+v", g, want)
	}
	if h := c.Lookup("a.lab"); h.User != "bob" || h.ServerAliveInterval != 5 || h.HostName != "a.lab" {
		t.Errorf("Lookup(a.lab) = %+v", h)
	}
	if h := c.Lookup("secret.lab"); h.User != "fallback" {
		t.Errorf("negated pattern: Lookup(secret.lab).User = %q, want fallback", h.User)
	}
	if h := c.Lookup("aliased"); h.HostName != "10.1.1.1" || h.HostKeyAlias != "fleet.lab" || !reflect.DeepEqual(h.CertificateFiles, []string{"~/.ssh/fleet-cert.pub"}) {
		t.Errorf("HostKeyAlias: Lookup(aliased) = %+v", h)
	}
	if h := c.Lookup("inc"); h.HostName != "10.9.9.9" || h.ProxyJump != "bastion" {
		t.Errorf("Include: Lookup(inc) = %+v", h)
	}
	h := c.Lookup("gpu2")
	h.Port = 22
	if got := h.Expand("~/.ssh/id %r-%h:%p %%", "me", "/home/me"); got != "/home/me/.ssh/id alice-gpu2.lab.example:22 %" {
		t.Errorf("Expand = %q", got)
	}
}

// TestSSHConfigProxyCommand reads ProxyCommand as written (quotes, "=" and
// all), and lets whichever of ProxyCommand and ProxyJump comes first win, as
// OpenSSH does.
func TestSSHConfigProxyCommand(t *testing.T) {
	src := `
Host cmd
  ProxyCommand=ssh -W "%h:%p" -o 'User=x' bastion  # kept
  ProxyJump ignored
Host jump
  ProxyJump bastion
  ProxyCommand ignored %h
Host off
  ProxyCommand none
Host *
  ProxyCommand nc %h %p
`
	c, err := ParseSSHConfig("config", []byte(src), "")
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Lookup("cmd"); h.ProxyCommand != `ssh -W "%h:%p" -o 'User=x' bastion  # kept` || h.ProxyJump != "" {
		t.Errorf("Lookup(cmd) = %+v", h)
	}
	if h := c.Lookup("jump"); h.ProxyJump != "bastion" || h.ProxyCommand != "" {
		t.Errorf("Lookup(jump) = %+v", h)
	}
	if h := c.Lookup("off"); h.ProxyCommand != "none" {
		t.Errorf("Lookup(off) = %+v", h)
	}
	if h := c.Lookup("other"); h.ProxyCommand != "nc %h %p" {
		t.Errorf("Lookup(other) = %+v", h)
	}
}

func TestSSHConfigErrors(t *testing.T) {
	for src, want := range map[string]string{
		"Host\n":                 "config:1: Host needs at least one pattern",
		"Host a\n  HostName\n":   "config:2: hostname needs a value",
		"Host a\n  User \"bob\n": "config:2: unterminated quote",
		"Include loop\n":         "nested more than",
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "loop"), []byte("Include loop\n"), 0o600)
		_, err := ParseSSHConfig("config", []byte(src), dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSSHConfig(%q) = %v, want %q", src, err, want)
		}
	}
}

func FuzzParseSSHConfig(f *testing.F) {
	f.Add("Host a b !c\n  HostName x\n  Port 22\nHost *\n  User=u # c\n")
	f.Add("Match all\n  ProxyJump a,b\n  IdentityFile \"a b\"\n")
	f.Add("Host *\n  ProxyCommand= ssh -W '%h:%p' \"b\" #x\n  ProxyJump j\n")
	f.Fuzz(func(t *testing.T, src string) {
		c, err := ParseSSHConfig("fuzz", []byte(src), "")
		if err != nil {
			return
		}
		for _, h := range []string{"a", "x.example", "10.0.0.1", ""} {
			got := c.Lookup(h)
			if got.HostName == "" && h != "" {
				t.Fatalf("Lookup(%q) has no HostName", h)
			}
			if got.ProxyJump != "" && got.ProxyCommand != "" {
				t.Fatalf("Lookup(%q) has both ProxyJump %q and ProxyCommand %q", h, got.ProxyJump, got.ProxyCommand)
			}
		}
	})
}

func FuzzParseDest(f *testing.F) {
	for _, s := range []string{"gpu1", "me@h:22", "[::1]:2", "ssh://x@y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDest(s)
		if err != nil {
			return
		}
		if d.Host == "" || d.Port < 0 || d.Port > 65535 || strings.ContainsAny(d.Host, " \t/'\"") {
			t.Fatalf("ParseDest(%q) = %+v", s, d)
		}
		again, err := ParseDest(d.String())
		if err != nil || again != d {
			t.Fatalf("ParseDest(%q).String() = %q parses to %+v, %v", s, d.String(), again, err)
		}
	})
}

func TestParseInventory(t *testing.T) {
	ms, err := ParseInventory("m.hcl", []byte(`
machine "gpu1" {
  ssh       = "gpu1"
  identity  = "~/.ssh/id_ed25519"
  agent_dir = "/opt/postern"
  labels    = { gpu = "a100" }
  env       = ["ANTHROPIC_API_KEY", "HF_TOKEN"]
}
machine "ci" {
  ssh         = "runner@10.0.0.5:2222"
  per_machine = 3
}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Machine{
		{Name: "gpu1", SSH: "gpu1", Identity: "~/.ssh/id_ed25519", AgentDir: "/opt/postern", Labels: map[string]string{"gpu": "a100"},
			Env: []string{"ANTHROPIC_API_KEY", "HF_TOKEN"}},
		{Name: "ci", SSH: "runner@10.0.0.5:2222", PerMachine: 3},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Fatalf("ParseInventory = %+v", ms)
	}
	for src, msg := range map[string]string{
		`machine "Bad Name" { ssh = "x" }`:                             "m.hcl:1:1: bad machine name",
		`machine "local" { ssh = "x" }`:                                "cannot be declared",
		`machine "a" { ssh = "a b" }`:                                  "bad ssh destination",
		`machine "a" {}`:                                               `m.hcl:1:13: Missing required argument`,
		"machine \"a\" { ssh = \"x\" }\nmachine \"a\" { ssh = \"y\" }": "m.hcl:2:1: machine declared twice",
		"machine \"a\" {\n ssh = \"x\"\n rungs = {}\n}":                "m.hcl:3:2: Unsupported argument",
		// Names only: a value written in the inventory would be stored.
		"machine \"a\" {\n ssh = \"x\"\n env = [\"K=secret\"]\n}": `m.hcl:1:1: bad env name: bad environment variable name "K=..."`,
		"machine \"a\" {\n ssh = \"x\"\n env = [\"A B\"]\n}":      "bad env name",
		"machine \"a\" {\n ssh = \"x\"\n per_machine = -1\n}":     "m.hcl:1:1: per_machine = -1 is out of range",
		"machine \"a\" {\n ssh = \"x\"\n per_machine = 1.5\n}":    "m.hcl:3:16: Unsuitable value type",
	} {
		_, err := ParseInventory("m.hcl", []byte(src))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseInventory(%q) = %v, want %q", src, err, msg)
		}
	}
}

func FuzzParseInventory(f *testing.F) {
	f.Add(`machine "a" { ssh = "x" }`)
	f.Add(`machine "b" { ssh = "u@h:22" labels = { k = "v" } }`)
	f.Add("machine \"c\" {\n ssh = \"c\"\n env = [\"A\", \"B\"]\n}")
	f.Add("machine \"d\" {\n ssh = \"d\"\n per_machine = 4\n}")
	f.Fuzz(func(t *testing.T, src string) {
		ms, err := ParseInventory("fuzz.hcl", []byte(src))
		if err != nil {
			return
		}
		for _, m := range ms {
			if CheckName(m.Name) != nil || m.Name == Local {
				t.Fatalf("accepted machine name %q", m.Name)
			}
			if _, err := ParseDest(m.SSH); err != nil {
				t.Fatalf("accepted ssh %q: %v", m.SSH, err)
			}
			for _, n := range m.Env {
				if CheckEnvName(n) != nil {
					t.Fatalf("accepted env name %q", n)
				}
			}
			if m.PerMachine < 0 || m.PerMachine > 1024 {
				t.Fatalf("accepted per_machine %d", m.PerMachine)
			}
		}
	})
}
