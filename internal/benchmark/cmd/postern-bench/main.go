//go:build linux

// Command postern-bench measures the door against direct connections, squid
// and tinyproxy on test hosts and prints markdown tables of ratios. It needs
// root, wrk, squid and tinyproxy, and sends nothing beyond loopback and the
// test hosts it makes.
package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/benchmark/cmd/internal/benchcmd"
)

func main() {
	if benchmark.BaselineRequested() {
		// Started by a run as the baseline proxy.
		benchcmd.Exit("postern-bench", benchmark.ServeBaseline())
		return
	}
	if benchmark.ChildRequested() {
		// Started by a run as its upstream echo server inside a test host.
		benchcmd.Exit("postern-bench", benchmark.ServeChild(context.Background()))
		return
	}
	var cfg benchmark.Config
	benchcmd.Main(benchcmd.Command{
		Name:       "postern-bench",
		RootFor:    "it makes network namespaces and raises the open-file limit",
		Timeout:    20 * time.Minute,
		Postern:    &cfg.Postern,
		Skip:       &cfg.Skip,
		SkipUsage:  "door, squid, tinyproxy, baseline",
		QuickUsage: "small run: 64 MiB × 3 bulk, 300 setup samples (50 after idling), 2s wrk, 1000 idle tunnels",
		Quick: func() {
			cfg.BulkBytes, cfg.BulkRuns = 64<<20, 3
			cfg.LatencySamples = 300
			cfg.IdleSetupSamples = 50
			cfg.RPSDuration = 2 * time.Second
			if cfg.IdleTunnels == 0 {
				cfg.IdleTunnels = 1000
			}
		},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.IdleTunnels, "tunnels", 0, "idle tunnels per proxy (default 10000)")
		},
		Run: func(ctx context.Context, log *slog.Logger) (benchcmd.Report, error) {
			cfg.Logger = log
			return benchmark.Run(ctx, cfg)
		},
	})
}
