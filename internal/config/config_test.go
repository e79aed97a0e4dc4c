package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	home, _ := os.UserHomeDir()
	c, err := Parse("config.hcl", []byte(`
policy          = "~/p.hcl"
machine         = "gpu1"
connect_timeout = "1m30s"
ssh {
  config      = "/etc/postern/ssh_config"
  known_hosts = "~/.ssh/kh"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{File: "config.hcl", Policy: filepath.Join(home, "p.hcl"), Machine: "gpu1", ConnectTimeout: 90 * time.Second,
		SSH: SSH{Config: "/etc/postern/ssh_config", KnownHosts: filepath.Join(home, ".ssh/kh")}}
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if c, err := Parse("empty.hcl", nil); err != nil || c != (Config{File: "empty.hcl"}) {
		t.Fatalf("empty: %+v %v", c, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"polcy = \"x\"\n", `config.hcl:1:1: Unsupported argument: An argument named "polcy" is not expected here. Did you mean "policy"?`},
		{"machine = \"a\"\nconnect_timeout = \"ten\"\n", `config.hcl:2:19: connect_timeout "ten" is not a duration`},
		{"connect_timeout = \"-1s\"\n", `config.hcl:1:19: connect_timeout "-1s" is not a duration`},
		{"ssh {\n  keys = \"x\"\n}\n", `config.hcl:2:3: Unsupported argument`},
		{"machine = [1]\n", `config.hcl:1:11: Unsuitable value type: Unsuitable value: string required`},
		{"policy = \n", `config.hcl:1:10: Invalid expression`},
	} {
		_, err := Parse("config.hcl", []byte(tc.src))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("%q: error %v, want it to start %q", tc.src, err, tc.want)
		}
	}
}

func TestLoadMissing(t *testing.T) {
	c, err := Load(filepath.Join(t.TempDir(), "none.hcl"))
	if err != nil || c != (Config{}) {
		t.Fatalf("missing file: %+v %v", c, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("policy = \"p\"\nssh {\n known_hosts = \"k\"\n}\n"))
	f.Add([]byte("connect_timeout = \"5s\""))
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := Parse("fuzz.hcl", src)
		if err == nil && c.ConnectTimeout < 0 {
			t.Fatalf("negative timeout from %q", src)
		}
	})
}
