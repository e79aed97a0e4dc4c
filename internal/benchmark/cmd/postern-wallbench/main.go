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
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/testhosts"
)

func main() {
	if benchmark.WallClientRequested() {
		// Started by the benchmark as its measuring client, directly or
		// behind the wall.
		if err := benchmark.ServeWallClient(context.Background(), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "postern-wallbench:", err)
			os.Exit(1)
		}
		return
	}
	var (
		cfg   benchmark.WallConfig
		quick bool
		out   string
	)
	flag.StringVar(&cfg.Postern, "postern", "", "built postern binary (default: build ./cmd/postern from the working directory)")
	flag.IntVar(&cfg.Startups, "startups", 0, "measured start-ups of each command (default 20)")
	flag.StringVar(&cfg.SRT, "srt", "", "srt executable (default: npm install "+benchmark.SRTPackage+" into the user cache)")
	flag.BoolVar(&cfg.NoSRT, "no-srt", false, "leave sandbox-runtime out")
	flag.BoolVar(&quick, "quick", false, "small run: 5 start-ups, 64 MiB × 2 bulk, 100 setups")
	flag.StringVar(&out, "out", "", "also write the markdown to this file")
	flag.Parse()
	if quick {
		if cfg.Startups == 0 {
			cfg.Startups = 5
		}
		cfg.BulkBytes, cfg.BulkRuns, cfg.SetupSamples = 64<<20, 2, 100
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	_ = testhosts.Sweep() // leftovers of an interrupted earlier run
	rep, err := benchmark.RunWall(ctx, cfg)
	if err != nil {
		if errors.Is(err, benchmark.ErrNeedsRoot) {
			fmt.Fprintln(os.Stderr, "postern-wallbench: needs root (it makes network namespaces and raises walls): run it with sudo")
		} else {
			fmt.Fprintln(os.Stderr, "postern-wallbench:", err)
		}
		os.Exit(1)
	}
	if err := benchmark.WriteMarkdown(rep, os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "postern-wallbench:", err)
		os.Exit(1)
	}
}
