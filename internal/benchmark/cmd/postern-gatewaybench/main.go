//go:build linux

// Command postern-gatewaybench measures postern's gateway against squid with
// per-user ACLs, both with many clients, on test hosts, and prints a markdown
// table of ratios. It needs root, wrk, squid and openssl, and sends nothing
// beyond loopback and the test hosts it makes.
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
	if benchmark.ChildRequested() {
		// Started by a run as its upstream echo server inside a test host.
		benchcmd.Exit("postern-gatewaybench", benchmark.ServeChild(context.Background()))
		return
	}
	var cfg benchmark.GatewayConfig
	benchcmd.Main(benchcmd.Command{
		Name:       "postern-gatewaybench",
		RootFor:    "it makes network namespaces and raises the open-file limit",
		Timeout:    15 * time.Minute,
		Postern:    &cfg.Postern,
		Skip:       &cfg.Skip,
		SkipUsage:  "squid",
		QuickUsage: "shorter run: 500 setups, 2s wrk, 40 policy changes (the clients and tunnels stay)",
		Quick: func() {
			cfg.SetupSamples = 500
			cfg.RPSDuration = 2 * time.Second
			cfg.PatchSamples = 40
		},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Clients, "clients", 0, "clients, each with a policy of its own (default 1000)")
			fs.IntVar(&cfg.IdleTunnels, "tunnels", 0, "idle tunnels (default 10000)")
		},
		Run: func(ctx context.Context, log *slog.Logger) (benchcmd.Report, error) {
			cfg.Logger = log
			return benchmark.RunGateway(ctx, cfg)
		},
	})
}
