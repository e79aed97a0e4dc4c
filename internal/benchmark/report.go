//go:build linux

package benchmark

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Goals the door is held to, against the other paths measured in the same
// run: throughput at least a bare Go splice proxy's and 1.5× squid's; added
// setup p50 at most 1.2× tinyproxy's and below squid's; keep-alive requests/s
// ahead of both; an idle tunnel within 40 KiB.
const (
	GoalThroughputVsBaseline = 1.0
	GoalThroughputVsSquid    = 1.5
	GoalSetupVsTinyproxy     = 1.2
	GoalKiBPerTunnel         = 40.0
)

// Markdown writes the report as markdown tables of ratios, with the absolute
// figures beside them.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d MiB RAM, Linux %s, %s.  \n", m.Cores, m.CPU, m.MemMiB, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Proxies: %s; %s; %s.  \n", orNA(m.Postern, "postern"), m.Squid, m.Tinyproxy)
	c := r.Config
	fmt.Fprintf(&b, "Run: %d × %d MiB bulk, %d setup samples back to back and %d after idling, wrk %s × %d connections, %d idle tunnels; took %s.\n\n",
		c.BulkRuns, c.BulkBytes>>20, c.LatencySamples, c.IdleSetupSamples, c.RPSDuration, c.RPSConns, c.IdleTunnels, r.Elapsed.Round(time.Second))

	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s.\n\n", n)
	}
	if len(r.Paths) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	d := r.Paths[0]
	ratio := func(x, base float64) string {
		if x == 0 || base == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", x/base)
	}

	b.WriteString("### Bulk throughput through a CONNECT tunnel\n\n")
	b.WriteString("Rounds interleave the paths; MB/s is a path's median, × direct the median of its per-round ratios.\n\n")
	b.WriteString("CPU s per GiB is the time all cores spent busy (client, proxy, server and kernel) for each GiB moved. ")
	fmt.Fprintf(&b, "The last column is the most the %d cores could carry at that cost per GiB were they all busy with nothing else (cores ÷ CPU s per GiB), as a fraction of the direct path's measured rate: the path cannot pass it on this machine without spending less CPU per byte.\n\n", m.Cores)
	b.WriteString("| path | MB/s | × direct | CPU s per GiB | ceiling × direct |\n|---|---:|---:|---:|---:|\n")
	for _, p := range r.Paths {
		cpu, ceiling := "–", "–"
		if p.CPUPerGiB > 0 && d.Throughput > 0 {
			cpu = fmt.Sprintf("%.2f", p.CPUPerGiB)
			ceiling = fmt.Sprintf("%.2f×", float64(m.Cores)/p.CPUPerGiB*(1<<30)/d.Throughput)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s |\n", p.Name, p.Throughput/1e6, ratio(p.tputRatio(d), 1), cpu, ceiling)
	}

	b.WriteString("\n### Connection setup (connect, CONNECT, first echoed byte)\n\n")
	b.WriteString("| path | p50 µs | p99 µs | added p50 µs | added p99 µs | p50 × direct |\n|---|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Paths {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", p.Name, us(p.LatP50), us(p.LatP99),
			added(p.LatP50, d.LatP50, p.Name == d.Name), added(p.LatP99, d.LatP99, p.Name == d.Name),
			ratio(float64(p.LatP50), float64(d.LatP50)))
	}

	b.WriteString("\n### Where the setup time goes (median of each step)\n\n")
	b.WriteString("Through a proxy: the client's TCP connect to it, the CONNECT exchange (which holds the proxy's own connect upstream, the counterpart of the direct path's connect), and the byte's echo across two hops.\n\n")
	b.WriteString("| path | TCP connect µs | CONNECT → 200 µs | first byte echoed µs |\n|---|---:|---:|---:|\n")
	for _, p := range r.Paths {
		c200 := "–"
		if p.Name != d.Name {
			c200 = us(p.Connect200P50)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.Name, us(p.ConnectP50), c200, us(p.EchoP50))
	}
	proxyConnect, floor := r.setupFloor()
	if floor > 0 {
		fmt.Fprintf(&b, "\nAny CONNECT proxy adds at least the client's connect to it and one request/response round trip to the direct path. Here the fastest connect to a proxy took %s µs and a round trip (the direct path's echo) %s µs, together %s µs spent before the proxy does any work of its own.\n",
			us(proxyConnect), us(d.EchoP50), us(floor))
	}

	fmt.Fprintf(&b, "\n### Connection setup after the machine idles (%s between connections)\n\n", c.IdleGap)
	b.WriteString("An agent opens a connection now and then, not one of a stream: between them the CPUs sleep, and every step of a setup starts by waking one. The paths take turns.\n\n")
	b.WriteString("| path | p50 µs | p99 µs | added p50 µs | p50 × direct |\n|---|---:|---:|---:|---:|\n")
	for _, p := range r.Paths {
		if p.IdleLatP50 == 0 {
			fmt.Fprintf(&b, "| %s | – | – | – | – |\n", p.Name)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", p.Name, us(p.IdleLatP50), us(p.IdleLatP99),
			added(p.IdleLatP50, d.IdleLatP50, p.Name == d.Name), ratio(float64(p.IdleLatP50), float64(d.IdleLatP50)))
	}

	b.WriteString("\n### Keep-alive requests (absolute-URI GET through the proxy, origin GET direct)\n\n")
	b.WriteString("| path | requests/s | × direct | failed requests |\n|---|---:|---:|---:|\n")
	for _, p := range r.Paths {
		if p.ConnectOnly {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %d |\n", p.Name, p.RPS, ratio(p.RPS, d.RPS), p.RPSErrors)
	}

	b.WriteString("\n### Idle CONNECT tunnels held at once\n\n")
	b.WriteString("| proxy | tunnels up | errors | RSS before MiB | RSS after MiB | KiB per tunnel | descriptors per tunnel | opened in |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Paths[1:] {
		if p.ConnectOnly {
			continue
		}
		if p.Idle == nil {
			fmt.Fprintf(&b, "| %s | – | – | – | – | – | – | – |\n", p.Name)
			continue
		}
		i := p.Idle
		fds := "–"
		if i.Tunnels > 0 {
			fds = fmt.Sprintf("%.1f", float64(i.FDsAfter-i.FDsBefore)/float64(i.Tunnels))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f | %.1f | %s | %s |\n", p.Name, i.Tunnels, i.Errors,
			float64(i.RSSBefore)/(1<<20), float64(i.RSSAfter)/(1<<20), i.BytesPerTunnel/1024, fds, i.OpenTime.Round(time.Millisecond))
	}

	// Proxies against each other, and the door against its goals.
	var door *PathResult
	for i := range r.Paths {
		if r.Paths[i].Name == "postern door" {
			door = &r.Paths[i]
		}
	}
	if door != nil {
		b.WriteString("\n### The door against the other proxies (door ÷ other; above 1 is better for throughput and requests/s, below 1 for latency and memory)\n\n")
		b.WriteString("| other | throughput | added setup p50 | added setup p50 after idling | requests/s | KiB per tunnel |\n|---|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Paths[1:] {
			if p.Name == door.Name {
				continue
			}
			mem := "–"
			if p.Idle != nil && door.Idle != nil && p.Idle.BytesPerTunnel > 0 {
				mem = fmt.Sprintf("%.2f×", door.Idle.BytesPerTunnel/p.Idle.BytesPerTunnel)
			}
			idle := "–"
			if door.IdleLatP50 > 0 && p.IdleLatP50 > 0 {
				idle = ratio(float64(door.IdleLatP50-d.IdleLatP50), float64(p.IdleLatP50-d.IdleLatP50))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", p.Name, ratio(door.tputRatio(d), p.tputRatio(d)),
				ratio(float64(door.LatP50-d.LatP50), float64(p.LatP50-d.LatP50)), idle, ratio(door.RPS, p.RPS), mem)
		}
		b.WriteString("\n### The door against its goals\n\n")
		b.WriteString("Each goal is a ratio to another path measured in this run. The last column is what this machine allows any proxy: the throughput ceiling at the door path's CPU per GiB, and the setup floor of a connect and one round trip (see above).\n\n")
		b.WriteString("| measure | goal | measured | met | this machine's bound |\n|---|---|---:|---|---|\n")
		find := func(prefix string) *PathResult {
			for i := range r.Paths {
				if strings.HasPrefix(r.Paths[i].Name, prefix) && r.Paths[i].Err == "" {
					return &r.Paths[i]
				}
			}
			return nil
		}
		squid, tiny, base := find("squid"), find("tinyproxy"), find("go baseline")
		tr := door.tputRatio(d)
		bound := "–"
		if door.CPUPerGiB > 0 && d.Throughput > 0 {
			bound = fmt.Sprintf("≤ %.2f of direct", float64(m.Cores)/door.CPUPerGiB*(1<<30)/d.Throughput)
		}
		goal := func(what, want string, got float64, ok bool, bound string) {
			fmt.Fprintf(&b, "| %s | %s | %.2f× | %s | %s |\n", what, want, got, yes(ok), bound)
		}
		notRun := func(what, want, other string) {
			fmt.Fprintf(&b, "| %s | %s | – | not measured (%s not run) | – |\n", what, want, other)
		}
		if base != nil && base.tputRatio(d) > 0 {
			x := tr / base.tputRatio(d)
			goal("throughput ÷ go baseline's", fmt.Sprintf("≥ %.1f×", GoalThroughputVsBaseline), x, x >= GoalThroughputVsBaseline, bound)
		} else {
			notRun("throughput ÷ go baseline's", fmt.Sprintf("≥ %.1f×", GoalThroughputVsBaseline), "the go baseline")
		}
		if squid != nil && squid.tputRatio(d) > 0 {
			x := tr / squid.tputRatio(d)
			goal("throughput ÷ squid's", fmt.Sprintf("≥ %.1f×", GoalThroughputVsSquid), x, x >= GoalThroughputVsSquid, bound)
		} else {
			notRun("throughput ÷ squid's", fmt.Sprintf("≥ %.1f×", GoalThroughputVsSquid), "squid")
		}
		ap := float64(door.LatP50 - d.LatP50)
		bound = "–"
		if _, floor := r.setupFloor(); floor > 0 {
			bound = "≥ " + us(floor) + " µs added"
		}
		if tiny != nil && tiny.LatP50 > d.LatP50 && door.LatP50 > 0 {
			x := ap / float64(tiny.LatP50-d.LatP50)
			goal("added setup p50 ÷ tinyproxy's", fmt.Sprintf("≤ %.1f×", GoalSetupVsTinyproxy), x, x <= GoalSetupVsTinyproxy, bound)
		} else {
			notRun("added setup p50 ÷ tinyproxy's", fmt.Sprintf("≤ %.1f×", GoalSetupVsTinyproxy), "tinyproxy")
		}
		if squid != nil && squid.LatP50 > d.LatP50 && door.LatP50 > 0 {
			x := ap / float64(squid.LatP50-d.LatP50)
			goal("added setup p50 ÷ squid's", "< 1.0×", x, x < 1, bound)
		} else {
			notRun("added setup p50 ÷ squid's", "< 1.0×", "squid")
		}
		for _, other := range []struct {
			name string
			p    *PathResult
		}{{"squid", squid}, {"tinyproxy", tiny}} {
			name, o := other.name, other.p
			if o != nil && o.RPS > 0 && door.RPS > 0 {
				x := door.RPS / o.RPS
				goal("keep-alive requests/s ÷ "+name+"'s", "> 1.0×", x, x > 1, "–")
			} else {
				notRun("keep-alive requests/s ÷ "+name+"'s", "> 1.0×", name)
			}
		}
		if door.Idle != nil {
			kib := door.Idle.BytesPerTunnel / 1024
			fmt.Fprintf(&b, "| memory per idle tunnel | ≤ %.0f KiB, 0 errors | %.1f KiB, %d errors | %s | – |\n", GoalKiBPerTunnel, kib, door.Idle.Errors,
				yes(kib <= GoalKiBPerTunnel && door.Idle.Errors == 0 && door.Idle.Tunnels > 0))
		}
	}
	var errs []string
	for _, p := range r.Paths {
		if p.Err != "" {
			errs = append(errs, fmt.Sprintf("- %s: %s", p.Name, p.Err))
		}
		if p.Idle != nil && p.Idle.FirstError != "" {
			errs = append(errs, fmt.Sprintf("- %s idle tunnels: first error: %s", p.Name, p.Idle.FirstError))
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n### Errors\n\n" + strings.Join(errs, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// setupFloor is what any CONNECT proxy adds to the direct path's setup here
// before doing work of its own: the fastest median connect to a proxy, plus
// one request/response round trip (the direct path's echo). Zero when not
// measured.
func (r *Report) setupFloor() (proxyConnect, floor time.Duration) {
	if len(r.Paths) == 0 || r.Paths[0].EchoP50 == 0 {
		return 0, 0
	}
	for _, p := range r.Paths[1:] {
		if p.ConnectP50 > 0 && (proxyConnect == 0 || p.ConnectP50 < proxyConnect) {
			proxyConnect = p.ConnectP50
		}
	}
	if proxyConnect == 0 {
		return 0, 0
	}
	return proxyConnect, proxyConnect + r.Paths[0].EchoP50
}

// tputRatio is p's throughput as a fraction of the direct path's d: the
// median of the per-round ratios when the rounds were interleaved, else the
// ratio of the medians.
func (p PathResult) tputRatio(d PathResult) float64 {
	if p.ThroughputRatio > 0 {
		return p.ThroughputRatio
	}
	if d.Throughput == 0 {
		return 0
	}
	return p.Throughput / d.Throughput
}

func us(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}

func added(x, base time.Duration, self bool) string {
	if self {
		return "0"
	}
	if x == 0 || base == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.0f", float64(x-base)/float64(time.Microsecond))
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func orNA(s, name string) string {
	if s == "" {
		return name + " (not run)"
	}
	return s
}
