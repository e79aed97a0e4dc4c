//go:build linux

// Command postern-inspectbench measures HTTPS requests to a host the door
// inspects (TLS terminated, each request judged, a header injected) against
// mitmproxy doing the same, beside the direct path, on test hosts. It prints
// markdown tables of ratios. It needs root and mitmproxy (installed with
// apt-get when missing, as root), and sends nothing beyond loopback and the
// test hosts it makes.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/benchmark/cmd/internal/benchcmd"
)

func main() {
	var cfg benchmark.InspectConfig
	benchcmd.Main(benchcmd.Command{
		Name:       "postern-inspectbench",
		RootFor:    "it makes network namespaces",
		Timeout:    10 * time.Minute,
		Postern:    &cfg.Postern,
		QuickUsage: "small run: 2s keep-alive runs, 500 sequential requests, 100 new connections per path",
		Quick: func() {
			cfg.RPSDuration, cfg.Samples, cfg.NewConnSamples = 2*time.Second, 500, 100
		},
		Run: func(ctx context.Context, log *slog.Logger) (benchcmd.Report, error) {
			cfg.Logger = log
			return benchmark.RunInspect(ctx, cfg)
		},
	})
}
