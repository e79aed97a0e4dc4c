//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/internal/benchmark"
)

// BenchmarkFleetDispatch dispatches 100 tasks of 'true' over three test
// machines (each a real OpenSSH sshd on a test host) at per_machine 4, with
// the agents installed (warm), and compares it with the same 100 commands
// run by a shell loop of 'postern run' in parallel (xargs -P 12) and by GNU
// parallel --sshlogin (4 jobs on each machine, no walls). It reports the
// dispatch's overhead per task (its wall time minus the ideal schedule of
// the same commands run directly, over the tasks; goal at most 50 ms) and
// the slots' utilisation while the queue was non-empty (goal at least 90 %).
// Run it with:
//
//	go test -run '^$' -bench BenchmarkFleetDispatch -benchtime 3x ./cmd/postern
func BenchmarkFleetDispatch(b *testing.B) {
	missing := benchmark.EnsureTools(context.Background(), os.Stderr, []benchmark.Tool{benchmark.ToolParallel, benchmark.ToolSshd, benchmark.ToolSsh})
	f := newFleetLab(b, 3)
	c := f.C
	const tasks, per = 100, 4
	var src strings.Builder
	fmt.Fprintf(&src, "machines = [\"m1\", \"m2\", \"m3\"]\nper_machine = %d\n", per)
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&src, "task \"n%03d\" {\n  command = [\"true\"]\n}\n", i)
	}
	file := tasksFile(b, src.String())
	// Warm: the agents installed on every machine, ssh host keys known.
	c.mustPostern(b, "dispatch", file)

	// The ideal schedule is made of the command's own time, run directly.
	direct := make([]time.Duration, tasks)
	for i := range direct {
		t0 := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		direct[i] = time.Since(t0)
	}

	var jobs strings.Builder
	for i := 0; i < tasks; i++ {
		fmt.Fprintf(&jobs, "m%d\n", i%3+1)
	}
	jobsFile := filepath.Join(b.TempDir(), "jobs")
	if err := os.WriteFile(jobsFile, []byte(jobs.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	shell := func(script string) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.Env = append(c.env(), "POSTERN="+binFor(b), "JOBS="+jobsFile, "SSHCONF="+c.sshFile("config"), "KNOWN="+c.sshFile("known_hosts"), "KEY="+c.Key)
		cmd.Dir = c.Dir // not in this source tree: a run there would ship it
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", script, err, out)
		}
		return time.Since(t0)
	}
	xargs := `xargs -P 12 -I M "$POSTERN" run --machine M -- true < "$JOBS"`
	par := `parallel --will-cite --ssh "ssh -F $SSHCONF -o UserKnownHostsFile=$KNOWN -o BatchMode=yes -i $KEY" -S 4/m1-alias,4/m2-alias,4/m3-alias --jobs 4 true ::: $(seq 100)`

	var disp, loop, gnu time.Duration
	var figs []fleet.Figures
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		out := c.mustPostern(b, "dispatch", file)
		disp += time.Since(t0)
		rec := dispatchRecord(b, c, dispatchID(b, out))
		figs = append(figs, fleet.Measure(rec, direct))
		loop += shell(xargs)
		if _, gone := missing["parallel"]; !gone {
			gnu += shell(par)
		}
	}
	b.StopTimer()
	n := time.Duration(b.N)
	var over time.Duration
	var util float64
	for _, fg := range figs {
		over += fg.OverheadPerTask
		util += fg.Utilisation
		b.Logf("dispatch: %s", fg)
	}
	over /= n
	util /= float64(b.N)
	b.ReportMetric(float64(over.Microseconds())/1e3, "ms-overhead/task")
	b.ReportMetric(100*util, "%-slots-in-use")
	b.ReportMetric(float64((disp / n).Milliseconds()), "dispatch-ms")
	b.ReportMetric(float64((loop / n).Milliseconds()), "xargs-postern-run-ms")
	b.ReportMetric(float64(loop)/float64(disp), "xargs/dispatch")
	if why, gone := missing["parallel"]; gone {
		b.Logf("GNU parallel: %s", why)
	} else {
		b.ReportMetric(float64((gnu / n).Milliseconds()), "gnu-parallel-ms")
		b.ReportMetric(float64(disp)/float64(gnu), "dispatch/gnu-parallel")
	}
}
