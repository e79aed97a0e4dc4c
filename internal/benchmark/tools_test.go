//go:build linux

package benchmark

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestPlanTools(t *testing.T) {
	missing := []Tool{ToolWrk, ToolSquid, ToolRipgrep, {Program: "squid3", Package: "squid"}}
	for _, tc := range []struct {
		name        string
		missing     []Tool
		root, apt   bool
		wantInstall string
		wantTell    string
	}{
		{"nothing missing", nil, true, true, "", ""},
		{"root with apt-get installs", missing, true, true, "ripgrep squid wrk", ""},
		{"not root prints the line", missing, false, true, "", "apt-get install -y ripgrep squid wrk"},
		{"no apt-get prints the line", missing, true, false, "", "apt-get install -y ripgrep squid wrk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planTools(tc.missing, tc.root, tc.apt)
			if got := strings.Join(p.Install, " "); got != tc.wantInstall || p.Tell != tc.wantTell {
				t.Fatalf("plan = install %q, tell %q; want install %q, tell %q", got, p.Tell, tc.wantInstall, tc.wantTell)
			}
		})
	}
}

// fakeSystem has the programs in have; apt-get install adds those its
// packages provide.
type fakeSystem struct {
	have     map[string]bool
	provides map[string][]string // package -> programs
	ran      []string
	failOn   string
}

func (f *fakeSystem) env(root bool) toolEnv {
	return toolEnv{
		root: root,
		lookPath: func(p string) (string, error) {
			if f.have[p] {
				return "/usr/bin/" + p, nil
			}
			return "", errors.New("not found")
		},
		run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			f.ran = append(f.ran, name+" "+strings.Join(args, " "))
			if f.failOn != "" && strings.Contains(strings.Join(args, " "), f.failOn) {
				return []byte("E: Unable to locate package " + f.failOn), errors.New("exit status 100")
			}
			if len(args) > 0 && args[0] == "install" {
				for _, pkg := range args[1:] {
					for _, p := range f.provides[pkg] {
						f.have[p] = true
					}
				}
			}
			return nil, nil
		},
	}
}

func TestEnsureTools(t *testing.T) {
	tools := []Tool{ToolSquid, ToolTinyproxy, ToolWrk}
	t.Run("root installs after update", func(t *testing.T) {
		f := &fakeSystem{have: map[string]bool{"apt-get": true, "tinyproxy": true}, provides: map[string][]string{"squid": {"squid"}, "wrk": {"wrk"}}}
		var out bytes.Buffer
		missing := ensureTools(context.Background(), &out, tools, f.env(true))
		if len(missing) != 0 {
			t.Fatalf("still missing: %v", missing)
		}
		if len(f.ran) != 2 || f.ran[0] != "apt-get update -qq" || f.ran[1] != "apt-get install -y -qq --no-install-recommends squid wrk" {
			t.Fatalf("ran %q", f.ran)
		}
	})
	t.Run("not root tells and measures the rest", func(t *testing.T) {
		f := &fakeSystem{have: map[string]bool{"apt-get": true, "wrk": true}}
		var out bytes.Buffer
		missing := ensureTools(context.Background(), &out, tools, f.env(false))
		if len(f.ran) != 0 {
			t.Fatalf("ran %q without root", f.ran)
		}
		if !strings.Contains(out.String(), "  apt-get install -y squid tinyproxy\n") {
			t.Fatalf("printed %q, want the one apt-get line", out.String())
		}
		if len(missing) != 2 || !strings.Contains(missing["squid"], "not measured: squid not found, needed for the squid rows (run 'apt-get install -y squid tinyproxy')") {
			t.Fatalf("missing = %q", missing)
		}
	})
	t.Run("a failed install names why", func(t *testing.T) {
		f := &fakeSystem{have: map[string]bool{"apt-get": true, "squid": true, "tinyproxy": true}, failOn: "wrk"}
		missing := ensureTools(context.Background(), &bytes.Buffer{}, tools, f.env(true))
		if !strings.Contains(missing["wrk"], "apt-get install wrk failed") || !strings.Contains(missing["wrk"], "Unable to locate package wrk") {
			t.Fatalf("missing = %q", missing)
		}
	})
}
