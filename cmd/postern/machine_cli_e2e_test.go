//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postern-dev/postern/internal/testhosts"
)

// Shell completion completes machine names and run ids, through cobra's
// __complete, which is what bash, zsh and fish call.
func TestCompletionOfMachinesAndRuns(t *testing.T) {
	c := newController(t)
	c.mustPostern(t, "machine", "add", "gpu1", "--ssh", "root@10.250.0.1")
	c.mustPostern(t, "machine", "add", "gpu2", "--ssh", "root@10.250.0.2")
	c.mustPostern(t, "machine", "add", "cpu1", "--ssh", "root@10.250.0.3")
	// A run on a machine never measured is refused, and recorded.
	if _, _, code := c.postern(t, "run", "--machine", "gpu1", "--", "true"); code != 77 {
		t.Fatalf("run on an unmeasured machine: exit %d, want 77", code)
	}
	run := lastRun(t, c)

	out := c.mustPostern(t, "__complete", "machine", "show", "")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"local\tlocal", "cpu1\troot@10.250.0.3", "gpu1\troot@10.250.0.1", "gpu2\troot@10.250.0.2", ":4"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("__complete machine show '':\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	out = c.mustPostern(t, "__complete", "machine", "clean", "gp")
	if !strings.HasPrefix(out, "gpu1\t") || !strings.Contains(out, "\ngpu2\t") || strings.Contains(out, "cpu1") {
		t.Fatalf("__complete machine clean gp:\n%s", out)
	}
	out = c.mustPostern(t, "__complete", "runs", "show", run.ID[:3])
	if !strings.HasPrefix(out, run.ID+"\tgpu1 refused true\n") {
		t.Fatalf("__complete runs show %s:\n%s", run.ID[:3], out)
	}
	out = c.mustPostern(t, "__complete", "runs", "events", "")
	if !strings.HasPrefix(out, run.ID+"\t") {
		t.Fatalf("__complete runs events '':\n%s", out)
	}
	// A second argument is not completed (and not with files).
	if out := c.mustPostern(t, "__complete", "machine", "show", "gpu1", ""); strings.TrimSpace(out) != ":4" {
		t.Fatalf("__complete of a second argument:\n%s", out)
	}
	// bash's script is generated and names the program.
	if out := c.mustPostern(t, "completion", "bash"); !strings.Contains(out, "__start_postern") {
		t.Fatalf("completion bash: %.200s", out)
	}
}

// 'postern version --json' is one object with every key; its commit is the
// one the binary was built from.
func TestVersionJSON(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	// Built as 'make build' builds it, with the version and commit given.
	bin := filepath.Join(t.TempDir(), "postern")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7 -X main.commit="+strings.TrimSpace(string(head)), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("version --json: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version --json: %v: %s", err, out)
	}
	for _, k := range []string{"version", "commit", "go", "os", "arch"} {
		if _, ok := v[k]; !ok {
			t.Fatalf("version --json has no %q: %s", k, out)
		}
	}
	goVer, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v["commit"] != strings.TrimSpace(string(head)) || v["version"] != "v9.8.7" || v["os"] != "linux" || v["go"] != strings.TrimSpace(string(goVer)) {
		t.Fatalf("version --json: %s; want commit %s, go %s", out, head, goVer)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(text), "postern v9.8.7 (commit "+strings.TrimSpace(string(head))+", go") {
		t.Fatalf("version: %s %v", text, err)
	}
}

// The manual pages are generated from the commands, and man(1) renders them.
func TestManPages(t *testing.T) {
	if _, err := exec.LookPath("man"); err != nil {
		t.Fatalf("man is needed (apt-get install man-db): %v", err)
	}
	testhosts.EndToEnd(t)
	// Only a build with the man tag writes manual pages.
	bin := filepath.Join(t.TempDir(), "postern-man")
	if out, err := exec.Command("go", "build", "-tags", "man", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build with -tags man: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "man1")
	if out, err := exec.Command(bin, "__man", dir).CombinedOutput(); err != nil {
		t.Fatalf("__man: %v\n%s", err, out)
	}
	if _, stderr, code := runPostern(t, "__man", filepath.Join(t.TempDir(), "man1")); code == 0 {
		t.Errorf("the binary built without the man tag still writes manual pages:\n%s", stderr)
	}
	for _, p := range []string{"postern.1", "postern-run.1", "postern-machine-clean.1", "postern-runs-list.1", "postern-version.1"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("no manual page %s: %v", p, err)
		}
	}
	cmd := exec.Command("man", "-l", "-P", "cat", filepath.Join(dir, "postern-machine-clean.1"))
	cmd.Env = append(os.Environ(), "MANWIDTH=100", "LANG=C")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("man -l: %v", err)
	}
	text := string(out)
	for _, want := range []string{"postern-machine-clean", "--dry-run", "localhost/postern-probe"} {
		if !strings.Contains(text, want) {
			t.Fatalf("man page of machine clean lacks %q:\n%s", want, text)
		}
	}
}

// run --machine and probe-confinement's names complete too; a name given is
// not offered again.
func TestCompletionOfMachineFlagsAndLists(t *testing.T) {
	c := newController(t)
	c.mustPostern(t, "machine", "add", "gpu1", "--ssh", "root@10.250.0.1")
	c.mustPostern(t, "machine", "add", "gpu2", "--ssh", "root@10.250.0.2")
	if out := c.mustPostern(t, "__complete", "run", "--machine", "gp"); !strings.HasPrefix(out, "gpu1\t") || !strings.Contains(out, "\ngpu2\t") {
		t.Fatalf("__complete run --machine gp:\n%s", out)
	}
	out := c.mustPostern(t, "__complete", "machine", "probe-confinement", "gpu1", "")
	if strings.Contains(out, "gpu1\t") || !strings.Contains(out, "gpu2\t") || !strings.Contains(out, "local\t") {
		t.Fatalf("__complete machine probe-confinement gpu1 '':\n%s", out)
	}
	if out := c.mustPostern(t, "__complete", "runs", "list", "--state", "r"); !strings.HasPrefix(out, "running\n") || !strings.Contains(out, "refused\n") {
		t.Fatalf("__complete runs list --state r:\n%s", out)
	}
}
