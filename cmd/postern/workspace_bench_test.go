//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
)

// BenchmarkWorkspace measures workspaces against the tools a person would
// use by hand, over the same ssh to the same sshd, side by side:
//
//   - the first shipment of a repository of ~100 MB of history and 5,000
//     files against 'git clone' of it over ssh (goal: at most 1.2×);
//   - the second run after a one-file change: shipping time (goal: at
//     most 150 ms) against 'rsync -a' of the work tree;
//   - bringing home a result of 10 commits against 'git fetch' of 10
//     commits over ssh (goal: at most 1.2×).
//
// The repository is generated from a fixed seed. Run it with:
//
//	go test -run '^$' -bench BenchmarkWorkspace -benchtime 1x -timeout 30m ./cmd/postern
func BenchmarkWorkspace(b *testing.B) {
	tools := []benchmark.Tool{benchmark.ToolRsync, benchmark.ToolSsh, benchmark.ToolSshd, {Program: "git", Package: "git", Rows: "the workspace benchmark"}}
	for _, why := range benchmark.EnsureTools(context.Background(), os.Stderr, tools) {
		b.Fatal(why)
	}
	r := workspaceLab(b)
	repo := filepath.Join(r.C.Home, "bench", "repo")
	t0 := time.Now()
	files := generateRepo(b, repo)
	b.Logf("generated %d files, %s of history, in %v", files, packSize(b, repo), time.Since(t0).Round(time.Millisecond))
	sshCmd := fmt.Sprintf("ssh -F %s -o UserKnownHostsFile=%s -o BatchMode=yes -i %s", r.C.sshFile("config"), r.C.sshFile("known_hosts"), r.C.Key)
	shell := func(dir, script string) time.Duration {
		b.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(r.C.env(), "GIT_SSH_COMMAND="+sshCmd, "RSYNC_RSH="+sshCmd, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v: %s", script, err, out)
		}
		return time.Since(t0)
	}
	run := func(args ...string) (ship, fetch time.Duration) {
		b.Helper()
		_, stderr, code := r.C.posternIn(b, repo, append([]string{"run", "--machine", "far", "--"}, args...)...)
		if code != 0 {
			b.Fatalf("postern run: exit %d: %s", code, stderr)
		}
		ws := lastRun(b, r.C).Workspace
		ship = ws.ShippedAt.Sub(ws.ShipStartedAt)
		if !ws.FetchedAt.IsZero() {
			fetch = ws.FetchedAt.Sub(ws.FetchStartedAt)
		}
		return ship, fetch
	}
	remoteTmp := filepath.Join(r.Remote.Home, "bench")
	if err := os.MkdirAll(remoteTmp, 0o755); err != nil {
		b.Fatal(err)
	}

	// 1. First shipment against git clone over ssh (a fresh clone each
	// time, into the remote's side of the shared disk).
	b.ResetTimer()
	var clones []time.Duration
	for i := range 3 {
		dest := filepath.Join(remoteTmp, fmt.Sprintf("clone-%d", i))
		clones = append(clones, shell(r.C.Home, fmt.Sprintf("git clone -q --no-local ssh://far-alias%s %s", repo, dest)))
	}
	var firsts []time.Duration
	for range 3 {
		caches := filepath.Join(r.Remote.Home, ".cache", "postern", "workspaces")
		if err := os.RemoveAll(caches); err != nil {
			b.Fatal(err)
		}
		ship, _ := run("true")
		firsts = append(firsts, ship)
	}

	// 2. A one-file change: the second run's shipping against rsync -a of
	// the work tree, each after a warm first copy.
	shell(repo, fmt.Sprintf("rsync -a --exclude .git ./ far-alias:%s/rsync/", remoteTmp))
	var seconds, rsyncs []time.Duration
	for i := range 7 {
		wsWrite(b, filepath.Join(repo, "d00", "f0000.txt"), fmt.Sprintf("changed %d\n", i), 0o644)
		rsyncs = append(rsyncs, shell(repo, fmt.Sprintf("rsync -a --exclude .git ./ far-alias:%s/rsync/", remoteTmp)))
		ship, _ := run("true")
		seconds = append(seconds, ship)
	}

	// 3. A result of 10 commits against git fetch of 10 commits over ssh.
	commits := `for i in 0 1 2 3 4 5 6 7 8 9; do echo "commit $i" >> d01/f0100.txt; git commit -qam "commit $i"; done`
	var fetches, gitFetches []time.Duration
	for i := range 5 {
		src := filepath.Join(remoteTmp, "clone-0")
		shell(src, "git config user.name B && git config user.email b@example.test && git reset -q --hard origin/HEAD && "+commits)
		gitFetches = append(gitFetches, shell(repo, fmt.Sprintf("git fetch -q ssh://far-alias%s HEAD:refs/bench/fetch-%d", src, i)))
		_, fetch := run("sh", "-c", commits)
		fetches = append(fetches, fetch)
		// The result is home, whole: its 10 commits, and the file they
		// made as git made it in the clone.
		ws := lastRun(b, r.C).Workspace
		if ws.Commits != 10 || ws.ResultBranch == "" {
			b.Fatalf("the result: %d commits on %q, want 10", ws.Commits, ws.ResultBranch)
		}
		if got, want := gitIn(b, repo, "rev-parse", ws.ResultBranch+":d01/f0100.txt"), gitIn(b, src, "rev-parse", "HEAD:d01/f0100.txt"); got != want {
			b.Fatalf("d01/f0100.txt in the result is %s, in the clone %s", got, want)
		}
	}
	b.StopTimer()

	first, clone := median(firsts), median(clones)
	second, rs := median(seconds), median(rsyncs)
	fetch, gf := median(fetches), median(gitFetches)
	b.ReportMetric(float64(first.Milliseconds()), "first-ship-ms")
	b.ReportMetric(float64(clone.Milliseconds()), "git-clone-ms")
	b.ReportMetric(float64(second.Milliseconds()), "second-ship-ms")
	b.ReportMetric(float64(rs.Milliseconds()), "rsync-ms")
	b.ReportMetric(float64(fetch.Milliseconds()), "fetch-ms")
	b.ReportMetric(float64(gf.Milliseconds()), "git-fetch-ms")
	fmt.Printf(`
#### Workspaces (%d files, %s of history; medians; over the same ssh to the same sshd)

| what | postern | reference | ratio | goal |
|---|---|---|---|---|
| first shipment vs git clone | %v | %v | %.2f× | ≤ 1.2× |
| second run, one file changed: shipping vs rsync -a | %v | %v | %.2f× | ≤ 150 ms |
| result of 10 commits vs git fetch | %v | %v | %.2f× | ≤ 1.2× |

samples: first %v; clone %v; second %v; rsync %v; fetch %v; git fetch %v
`, files, packSize(b, repo), first, clone, ratio(first, clone), second, rs, ratio(second, rs), fetch, gf, ratio(fetch, gf),
		firsts, clones, seconds, rsyncs, fetches, gitFetches)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

func packSize(b testing.TB, repo string) string {
	out := gitIn(b, repo, "count-objects", "-vH")
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "size-pack: "); ok {
			return v
		}
	}
	return "?"
}

// generateRepo makes a repository of 5,000 files of incompressible
// content, from a fixed seed: a first commit of 5,000 files of 4 KiB, then
// 16 commits each rewriting 250 of them with 20 KiB: ~100 MB of history.
func generateRepo(b testing.TB, repo string) int {
	b.Helper()
	if err := os.MkdirAll(repo, 0o755); err != nil {
		b.Fatal(err)
	}
	gitIn(b, repo, "init", "-q", "-b", "main")
	gitIn(b, repo, "config", "user.name", "Bench")
	gitIn(b, repo, "config", "user.email", "bench@example.test")
	gitIn(b, repo, "config", "gc.auto", "0")
	rng := rand.New(rand.NewChaCha8([32]byte{'p', 'o', 's', 't', 'e', 'r', 'n'}))
	const files = 5000
	name := func(i int) string {
		return filepath.Join(repo, fmt.Sprintf("d%02d", i/100), fmt.Sprintf("f%04d.txt", i))
	}
	write := func(i, size int) {
		buf := make([]byte, size)
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		wsWrite(b, name(i), string(buf), 0o644)
	}
	for i := range files {
		write(i, 4<<10)
	}
	gitIn(b, repo, "add", "-A")
	gitIn(b, repo, "commit", "-qm", "5000 files")
	for c := range 16 {
		for k := range 250 {
			write((c*250+k*7)%files, 20<<10)
		}
		gitIn(b, repo, "commit", "-qam", fmt.Sprintf("rewrite %d", c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "gc", "-q").CombinedOutput(); err != nil {
		b.Fatalf("git gc: %v: %s", err, out)
	}
	return files
}
