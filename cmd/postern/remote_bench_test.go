//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkRemoteRun compares 'postern run --machine M -- true' (ssh, the agent
// already installed, wall and door raised on the remote, Landlock, the run record
// and its events at home) with 'ssh M true' to the same sshd, and reports the
// ratio (goal: at most 1.5). It also reports the cold first run, which uploads the
// agent. Run it with:
//
//	go test -run '^$' -bench BenchmarkRemoteRun -benchtime 20x ./cmd/postern
func BenchmarkRemoteRun(b *testing.B) {
	r := newRemoteLab(b)
	name := "far"
	r.C.writeSSH(b, "config", "Host far-alias\n  HostName "+r.Remote.Addr.String()+"\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n")
	r.C.trust(b, r.Remote.Addr.String(), r.Remote.HostPub)
	r.C.mustPostern(b, "machine", "add", name, "--ssh", name+"-alias")
	r.C.mustPostern(b, "machine", "probe-confinement", name)

	// Cold: remove the installed agent, so the next run uploads it.
	for _, f := range agentFiles(b, r.Remote.Home) {
		if err := os.Remove(f); err != nil {
			b.Fatal(err)
		}
	}
	t0 := time.Now()
	r.C.mustPostern(b, "run", "--machine", name, "--", "true")
	cold := time.Since(t0)

	sshTrue := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ssh", "-F", r.C.sshFile("config"), "-o", "UserKnownHostsFile="+r.C.sshFile("known_hosts"),
			"-o", "BatchMode=yes", "-i", r.C.Key, name+"-alias", "true")
		cmd.Env = r.C.env()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ssh true: %v: %s", err, out)
		}
	}
	// Warm both up once.
	sshTrue()
	r.C.mustPostern(b, "run", "--machine", name, "--", "true")

	b.ResetTimer()
	var sshTotal, runTotal time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		sshTrue()
		sshTotal += time.Since(t0)
		t0 = time.Now()
		r.C.mustPostern(b, "run", "--machine", name, "--", "true")
		runTotal += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(sshTotal.Milliseconds())/n, "ssh-ms/op")
	b.ReportMetric(float64(runTotal.Milliseconds())/n, "postern-ms/op")
	b.ReportMetric(float64(runTotal)/float64(sshTotal), "ratio")
	b.ReportMetric(float64(cold.Milliseconds()), "cold-first-run-ms")
}
