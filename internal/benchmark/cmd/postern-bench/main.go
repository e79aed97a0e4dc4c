//go:build linux

// Command postern-bench measures the door against direct connections, squid
// and tinyproxy on test hosts and prints markdown tables of ratios. It needs
// root, wrk, squid and tinyproxy, and sends nothing beyond loopback and the
// test hosts it makes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/testhosts"
)

func main() {
	if benchmark.BaselineRequested() {
		// Started by a run as the baseline proxy.
		if err := benchmark.ServeBaseline(); err != nil {
			fmt.Fprintln(os.Stderr, "postern-bench:", err)
			os.Exit(1)
		}
		return
	}
	if benchmark.ChildRequested() {
		// Started by a run as its upstream echo server inside a test host.
		if err := benchmark.ServeChild(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "postern-bench:", err)
			os.Exit(1)
		}
		return
	}
	var (
		cfg   benchmark.Config
		quick bool
		skip  string
		out   string
	)
	flag.StringVar(&cfg.Postern, "postern", "", "built postern binary (default: build ./cmd/postern from the working directory)")
	flag.BoolVar(&quick, "quick", false, "small run: 64 MiB × 3 bulk, 300 setup samples (50 after idling), 2s wrk, 1000 idle tunnels")
	flag.IntVar(&cfg.IdleTunnels, "tunnels", 0, "idle tunnels per proxy (default 10000)")
	flag.StringVar(&skip, "skip", "", "comma-separated proxies not to run: door, squid, tinyproxy, baseline")
	flag.StringVar(&out, "out", "", "also write the markdown to this file")
	flag.Parse()
	if quick {
		cfg.BulkBytes, cfg.BulkRuns = 64<<20, 3
		cfg.LatencySamples = 300
		cfg.IdleSetupSamples = 50
		cfg.RPSDuration = 2 * time.Second
		if cfg.IdleTunnels == 0 {
			cfg.IdleTunnels = 1000
		}
	}
	if skip != "" {
		cfg.Skip = strings.Split(skip, ",")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()

	// Leftovers of an interrupted earlier run.
	_ = testhosts.Sweep()
	rep, err := benchmark.Run(ctx, cfg)
	if err != nil {
		if errors.Is(err, benchmark.ErrNeedsRoot) {
			fmt.Fprintln(os.Stderr, "postern-bench: needs root (it makes network namespaces and raises the open-file limit): run it with sudo")
		} else {
			fmt.Fprintln(os.Stderr, "postern-bench:", err)
		}
		os.Exit(1)
	}
	if err := benchmark.WriteMarkdown(rep, os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "postern-bench:", err)
		os.Exit(1)
	}
}
