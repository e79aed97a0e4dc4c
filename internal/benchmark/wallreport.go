//go:build linux

package benchmark

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Markdown writes the wall report as markdown tables: absolute figures with
// the ratios beside them, then the goals.
func (r *WallReport) Markdown(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d MiB RAM, Linux %s, %s.  \n", m.Cores, m.CPU, m.MemMiB, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Sandboxes: %s; bubblewrap %s; sandbox-runtime %s (node %s).  \n", orNA(m.Postern, "postern"), r.Bwrap, r.SRT, r.Node)
	c := r.Config
	fmt.Fprintf(&b, "Run: %d start-ups of each command, %d × %d MiB bulk and %d connection setups per path; took %s.\n\n",
		c.Startups, c.BulkRuns, c.BulkBytes>>20, c.SetupSamples, r.Elapsed.Round(time.Second))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s.\n\n", n)
	}

	bare, pst, srt := r.startup(startBare), r.startup(startPostern), r.startup(startSRT)
	b.WriteString("### Start-up: a command that does nothing, from exec to exit\n\n")
	b.WriteString("| command | runs | mean ms | p50 ms | p90 ms | p50 over bare ms | p50 ÷ postern |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Startup {
		if len(s.Samples) == 0 {
			fmt.Fprintf(&b, "| `%s` | – | – | – | – | – | – |\n", s.Command)
			continue
		}
		// Each lane against its own bare `true` and its own postern.
		base, lanePst := r.startup(baseOf(s.Name)), r.inLane(s, startPostern, startPosternUser)
		over, per := "–", "–"
		if base != nil && len(base.Samples) > 0 {
			over = ms(s.P50() - base.P50())
		}
		if lanePst != nil && len(lanePst.Samples) > 0 {
			per = fmt.Sprintf("%.2f×", float64(s.P50())/float64(lanePst.P50()))
		}
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %s | %s | %s |\n", s.Command, len(s.Samples), ms(s.Mean()), ms(s.P50()), ms(s.P90()), over, per)
	}

	// What each start-up cost the machine's processors, beside its time:
	// where the cores are few, processor time of two processes at once is
	// time on the clock.
	b.WriteString("\n### Start-up: processor time, of the command and every process it waited for\n\n")
	b.WriteString("| command | cpu p50 ms | cpu over bare ms | cpu ÷ bwrap | cores busy (cpu ÷ time, p50) | page faults p50 | context switches p50 |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Startup {
		if len(s.CPU) == 0 {
			fmt.Fprintf(&b, "| `%s` | – | – | – | – | – | – |\n", s.Command)
			continue
		}
		base, bw := r.startup(baseOf(s.Name)), r.inLane(s, startBwrap, startBwrapUser)
		over, per := "–", "–"
		if base != nil && len(base.CPU) > 0 {
			over = ms(s.CPUP50() - base.CPUP50())
		}
		if bw != nil && len(bw.CPU) > 0 && bw.CPUP50() > 0 {
			per = fmt.Sprintf("%.2f×", float64(s.CPUP50())/float64(bw.CPUP50()))
		}
		busy := "–"
		if s.P50() > 0 {
			busy = fmt.Sprintf("%.2f", float64(s.CPUP50())/float64(s.P50()))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %d | %d |\n", s.Command, ms(s.CPUP50()), over, per, busy, countP50(s.Faults), countP50(s.Switches))
	}

	if len(r.Paths) > 0 {
		d := r.Paths[0]
		b.WriteString("\n### Through the wall against a plain network namespace (same client, same upstream host)\n\n")
		b.WriteString("| path | bulk MB/s | × direct | setup p50 µs | setup p99 µs | added p50 µs | p50 × direct |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for i, p := range r.Paths {
			ratio := func(x, base float64) string {
				if x == 0 || base == 0 {
					return "–"
				}
				return fmt.Sprintf("%.2f×", x/base)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %s | %s |\n", p.Name, p.Throughput/1e6, ratio(p.Throughput, d.Throughput),
				us(p.SetupP50), us(p.SetupP99), added(p.SetupP50, d.SetupP50, i == 0), ratio(float64(p.SetupP50), float64(d.SetupP50)))
		}
	}

	b.WriteString("\n### The wall against its goals\n\n| measure | goal | measured | met |\n|---|---|---:|---|\n")
	if bare != nil && pst != nil && len(bare.Samples) > 0 && len(pst.Samples) > 0 {
		over := pst.P50() - bare.P50()
		fmt.Fprintf(&b, "| `postern run -- true` over bare `true` (p50) | ≤ %s ms | %s ms | %s |\n", ms(GoalWallStartOverhead), ms(over), yes(over <= GoalWallStartOverhead))
	} else {
		fmt.Fprintf(&b, "| `postern run -- true` over bare `true` (p50) | ≤ %s ms | not measured | **no** |\n", ms(GoalWallStartOverhead))
	}
	if bu, pu := r.startup(startBareUser), r.startup(startPosternUser); bu != nil && pu != nil {
		if len(bu.Samples) > 0 && len(pu.Samples) > 0 {
			over := pu.P50() - bu.P50()
			fmt.Fprintf(&b, "| `%s` over `%s` (p50) | ≤ %s ms | %s ms | %s |\n", pu.Command, bu.Command, ms(GoalWallStartOverhead), ms(over), yes(over <= GoalWallStartOverhead))
		} else {
			// A machine that refuses this user a user namespace: no lane
			// to measure (why is under "Not measured").
			fmt.Fprintf(&b, "| `%s` over `%s` (p50) | ≤ %s ms | not measured | – |\n", pu.Command, bu.Command, ms(GoalWallStartOverhead))
		}
	}
	if srt != nil && pst != nil && len(srt.Samples) > 0 && len(pst.Samples) > 0 {
		x := float64(srt.P50()) / float64(pst.P50())
		fmt.Fprintf(&b, "| `srt -c true` ÷ `postern run -- true` (p50) | ≥ %.0f× | %.1f× | %s |\n", GoalSRTOverPostern, x, yes(x >= GoalSRTOverPostern))
	} else {
		fmt.Fprintf(&b, "| `srt -c true` ÷ `postern run -- true` (p50) | ≥ %.0f× | not measured | – |\n", GoalSRTOverPostern)
	}

	var errs []string
	for _, s := range r.Startup {
		if s.Err != "" {
			errs = append(errs, fmt.Sprintf("- `%s`: %s", s.Command, s.Err))
		}
	}
	for _, p := range r.Paths {
		if p.Err != "" {
			errs = append(errs, fmt.Sprintf("- %s: %s", p.Name, p.Err))
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n### Not measured\n\n" + strings.Join(errs, "\n") + "\n")
	}
	var retried []string
	for _, s := range r.Startup {
		if s.FirstTries != "" {
			retried = append(retried, fmt.Sprintf("- `%s`: %s", s.Command, s.FirstTries))
		}
	}
	if len(retried) > 0 {
		b.WriteString("\n### Measured after a failed first start\n\n" + strings.Join(retried, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// inLane is the start-up named root, or user for a start-up of the
// unprivileged user's lane: s's own lane's row to compare it with.
func (r *WallReport) inLane(s StartupResult, root, user string) *StartupResult {
	if baseOf(s.Name) == startBareUser {
		return r.startup(user)
	}
	return r.startup(root)
}

func (r *WallReport) startup(name string) *StartupResult {
	for i := range r.Startup {
		if r.Startup[i].Name == name {
			return &r.Startup[i]
		}
	}
	return nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}
