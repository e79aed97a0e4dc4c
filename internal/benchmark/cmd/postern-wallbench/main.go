//go:build linux

// Command postern-wallbench measures the wall: the start-up cost of
// `postern run -- true` beside bare `true`, bubblewrap and Anthropic's
// sandbox-runtime (srt), and bulk throughput and connection setup through the
// wall against the same client in a plain network namespace. It prints
// markdown tables of ratios. It needs root; it sends nothing beyond the test
// hosts it makes, and installs srt with npm unless given -srt or -no-srt.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/benchmark/cmd/internal/benchcmd"
)

func main() {
	if benchmark.WallClientRequested() {
		// Started by the benchmark as its measuring client, directly or
		// behind the wall.
		benchcmd.Exit("postern-wallbench", benchmark.ServeWallClient(context.Background(), os.Stdout))
		return
	}
	var cfg benchmark.WallConfig
	benchcmd.Main(benchcmd.Command{
		Name:       "postern-wallbench",
		RootFor:    "it makes network namespaces and raises walls",
		Timeout:    10 * time.Minute,
		Postern:    &cfg.Postern,
		QuickUsage: "small run: 5 start-ups, 64 MiB × 2 bulk, 100 setups",
		Quick: func() {
			if cfg.Startups == 0 {
				cfg.Startups = 5
			}
			cfg.BulkBytes, cfg.BulkRuns, cfg.SetupSamples = 64<<20, 2, 100
		},
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Startups, "startups", 0, "measured start-ups of each command (default 20)")
			fs.StringVar(&cfg.SRT, "srt", "", "srt executable (default: npm install "+benchmark.SRTPackage+" into the user cache)")
			fs.BoolVar(&cfg.NoSRT, "no-srt", false, "leave sandbox-runtime out")
		},
		Run: func(ctx context.Context, log *slog.Logger) (benchcmd.Report, error) {
			cfg.Logger = log
			return benchmark.RunWall(ctx, cfg)
		},
	})
}
