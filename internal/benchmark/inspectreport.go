//go:build linux

package benchmark

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Markdown writes the inspection report: requests per second and latencies,
// each beside its ratio to the direct path and to mitmproxy.
func (r *InspectReport) Markdown(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores (%s), %d MiB RAM, Linux %s, %s.  \n", m.Cores, m.CPU, m.MemMiB, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Proxies: %s; %s.  \n", orNA(m.Postern, "postern"), r.Mitmproxy)
	c := r.Config
	fmt.Fprintf(&b, "Run: keep-alive %s × %d connections, %d sequential requests, %d new connections per path; took %s.\n\n",
		c.RPSDuration, c.RPSConns, c.Samples, c.NewConnSamples, r.Elapsed.Round(time.Second))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s.\n\n", n)
	}
	if len(r.Paths) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	d := r.Paths[0]
	var mitm *InspectPath
	for i := range r.Paths {
		if r.Paths[i].Name == "mitmproxy" && r.Paths[i].Err == "" {
			mitm = &r.Paths[i]
		}
	}
	ratio := func(x, base float64) string {
		if x == 0 || base == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", x/base)
	}
	addedBy := func(x, base time.Duration) time.Duration {
		if x == 0 || base == 0 {
			return 0
		}
		return x - base
	}
	b.WriteString("#### Inspected HTTPS: keep-alive requests per second\n\n")
	b.WriteString("| path | requests/s | × direct | × mitmproxy | errors |\n|---|---:|---:|---:|---:|\n")
	for _, p := range r.Paths {
		if p.Err != "" {
			fmt.Fprintf(&b, "| %s | not measured: %s | | | |\n", p.Name, p.Err)
			continue
		}
		vsMitm := "–"
		if mitm != nil && p.Name != "direct" {
			vsMitm = ratio(p.RPS, mitm.RPS)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d |\n", p.Name, p.RPS, ratio(p.RPS, d.RPS), vsMitm, p.Errors)
	}
	b.WriteString("\n#### Inspected HTTPS: latency added to a request\n\n")
	b.WriteString("A kept connection's request, one at a time; and a new connection's first request (CONNECT through a proxy, a full TLS handshake with it, and its own with the host). Added is the path's percentile minus direct's.\n\n")
	b.WriteString("| path | kept p50 µs | p99 µs | added p50 µs | added × mitmproxy's | new p50 µs | p99 µs | added p50 µs | added × mitmproxy's |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Paths {
		if p.Err != "" {
			continue
		}
		kept, fresh := addedBy(p.LatP50, d.LatP50), addedBy(p.NewP50, d.NewP50)
		vsKept, vsNew := "–", "–"
		if mitm != nil && p.Name != "direct" && p.Name != "mitmproxy" {
			vsKept = ratio(float64(kept), float64(addedBy(mitm.LatP50, d.LatP50)))
			vsNew = ratio(float64(fresh), float64(addedBy(mitm.NewP50, d.NewP50)))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Name, us(p.LatP50), us(p.LatP99), added(p.LatP50, d.LatP50, p.Name == "direct"), vsKept,
			us(p.NewP50), us(p.NewP99), added(p.NewP50, d.NewP50, p.Name == "direct"), vsNew)
	}
	var door *InspectPath
	for i := range r.Paths {
		if r.Paths[i].Name == "postern door" && r.Paths[i].Err == "" {
			door = &r.Paths[i]
		}
	}
	if door != nil && mitm != nil {
		b.WriteString("\n#### The door against its goal: faster than mitmproxy doing the same interception\n\n")
		b.WriteString("| goal | door | mitmproxy | met |\n|---|---:|---:|---|\n")
		fmt.Fprintf(&b, "| more keep-alive requests/s | %.0f | %.0f | %s |\n", door.RPS, mitm.RPS, yes(door.RPS > mitm.RPS))
		dk, mk := addedBy(door.LatP50, d.LatP50), addedBy(mitm.LatP50, d.LatP50)
		fmt.Fprintf(&b, "| less latency added to a kept connection's request (p50) | %s µs | %s µs | %s |\n", us(dk), us(mk), yes(dk < mk))
		dn, mn := addedBy(door.NewP50, d.NewP50), addedBy(mitm.NewP50, d.NewP50)
		fmt.Fprintf(&b, "| less latency added to a new connection's first request (p50) | %s µs | %s µs | %s |\n", us(dn), us(mn), yes(dn < mn))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
