//go:build linux

package main

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// TestDemo runs the whole demo against a freshly built postern, as 'make demo'
// does, so a change that breaks the demo (or the wall under it) fails here.
func TestDemo(t *testing.T) {
	testhosts.RequireRoot(t)
	if testing.Short() {
		t.Skip("the demo builds postern and raises a wall; skipped with -short")
	}
	for _, tool := range []string{"curl", "dig", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the demo's agent needs %s: %v (apt-get install curl dnsutils)", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "postern")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/postern")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build postern: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := demo(ctx, config{Postern: bin, Root: "../..", State: t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"OK       allowed-tls",
		"BLOCKED  dns-exfil",
		"HTTP 403 from the door:",
		"Denied names never left the machine",
		"All 10 attempts went as the policy says: 4 reached their host, 6 were stopped",
		"Test hosts removed.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestJudgeCatchesEveryDeparture(t *testing.T) {
	all := map[string]string{}
	for _, a := range attempts {
		all[a.ID] = a.Want
	}
	table, reached, blocked, problems := judge(all)
	if len(problems) != 0 || reached != 4 || blocked != 6 || strings.Contains(table, "UNEXPECTED") {
		t.Fatalf("all as expected: reached %d blocked %d problems %q\n%s", reached, blocked, problems, table)
	}
	for _, a := range attempts {
		flipped := map[string]string{}
		for k, v := range all {
			flipped[k] = v
		}
		if a.Want == "OK" {
			flipped[a.ID] = "BLOCKED"
		} else {
			flipped[a.ID] = "OK"
		}
		if _, _, _, p := judge(flipped); len(p) != 1 || !strings.Contains(p[0], a.ID) {
			t.Errorf("%s flipped: problems %q", a.ID, p)
		}
		missing := map[string]string{}
		for k, v := range all {
			if k != a.ID {
				missing[k] = v
			}
		}
		if _, _, _, p := judge(missing); len(p) != 1 || !strings.Contains(p[0], "no result line") {
			t.Errorf("%s missing: problems %q", a.ID, p)
		}
	}
}

func TestParseAgent(t *testing.T) {
	out := "noise\n" +
		"OK       allowed-tls   https://allowed.demo.test/ -> HTTP 200\n" +
		"BLOCKED  private-ip    http://10.1.2.3/ -> HTTP 403 from the door:\n" +
		"                        | reason: OK  not-a-result line\n" +
		"OK       twice         a\n" +
		"BLOCKED  twice         b\n" +
		"OKAY     odd           c\n"
	got := parseAgent(out)
	want := map[string]string{"allowed-tls": "OK", "private-ip": "BLOCKED", "twice": "INCONSISTENT"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestRewriteCIDRs(t *testing.T) {
	src, err := os.ReadFile("../policies/demo.hcl")
	if err != nil {
		t.Fatal(err)
	}
	got, err := rewriteCIDRs(string(src), netip.MustParsePrefix("10.170.1.2/24"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `allow_cidrs = ["10.170.1.0/24"]`) || strings.Contains(got, `allow_cidrs = ["10.203.0.0/24"]`) {
		t.Fatalf("rewritten policy:\n%s", got)
	}
	if _, err := rewriteCIDRs("mode = \"enforce\"\n", netip.MustParsePrefix("10.0.0.0/24")); err == nil {
		t.Fatal("a policy without allow_cidrs was accepted")
	}
	body := policyBody(got)
	if strings.HasPrefix(body, "#") || !strings.Contains(body, "allow_cidrs") {
		t.Fatalf("policy body:\n%s", body)
	}
}
