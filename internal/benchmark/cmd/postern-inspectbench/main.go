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
	var (
		cfg   benchmark.InspectConfig
		quick bool
		out   string
	)
	flag.StringVar(&cfg.Postern, "postern", "", "built postern binary (default: build ./cmd/postern from the working directory)")
	flag.BoolVar(&quick, "quick", false, "small run: 2s keep-alive runs, 500 sequential requests, 100 new connections per path")
	flag.StringVar(&out, "out", "", "also write the markdown to this file")
	flag.Parse()
	if quick {
		cfg.RPSDuration, cfg.Samples, cfg.NewConnSamples = 2*time.Second, 500, 100
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_ = testhosts.Sweep()
	rep, err := benchmark.RunInspect(ctx, cfg)
	if err != nil {
		if errors.Is(err, benchmark.ErrNeedsRoot) {
			fmt.Fprintln(os.Stderr, "postern-inspectbench: needs root (it makes network namespaces): run it with sudo")
		} else {
			fmt.Fprintln(os.Stderr, "postern-inspectbench:", err)
		}
		os.Exit(1)
	}
	if err := benchmark.WriteMarkdown(rep, os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "postern-inspectbench:", err)
		os.Exit(1)
	}
}
