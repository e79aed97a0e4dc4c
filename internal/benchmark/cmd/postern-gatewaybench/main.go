//go:build linux

// Command postern-gatewaybench measures postern's gateway against squid with
// per-user ACLs, both with many clients, on test hosts, and prints a markdown
// table of ratios. It needs root, wrk, squid and openssl, and sends nothing
// beyond loopback and the test hosts it makes.
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
	if benchmark.ChildRequested() {
		// Started by a run as its upstream echo server inside a test host.
		if err := benchmark.ServeChild(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "postern-gatewaybench:", err)
			os.Exit(1)
		}
		return
	}
	var (
		cfg   benchmark.GatewayConfig
		quick bool
		skip  string
		out   string
	)
	flag.StringVar(&cfg.Postern, "postern", "", "built postern binary (default: build ./cmd/postern from the working directory)")
	flag.IntVar(&cfg.Clients, "clients", 0, "clients, each with a policy of its own (default 1000)")
	flag.IntVar(&cfg.IdleTunnels, "tunnels", 0, "idle tunnels (default 10000)")
	flag.BoolVar(&quick, "quick", false, "shorter run: 500 setups, 2s wrk, 40 policy changes (the clients and tunnels stay)")
	flag.StringVar(&skip, "skip", "", "comma-separated proxies not to run: squid")
	flag.StringVar(&out, "out", "", "also write the markdown to this file")
	flag.Parse()
	if quick {
		cfg.SetupSamples = 500
		cfg.RPSDuration = 2 * time.Second
		cfg.PatchSamples = 40
	}
	if skip != "" {
		cfg.Skip = strings.Split(skip, ",")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	_ = testhosts.Sweep()
	rep, err := benchmark.RunGateway(ctx, cfg)
	if err != nil {
		if errors.Is(err, benchmark.ErrNeedsRoot) {
			fmt.Fprintln(os.Stderr, "postern-gatewaybench: needs root (it makes network namespaces and raises the open-file limit): run it with sudo")
		} else {
			fmt.Fprintln(os.Stderr, "postern-gatewaybench:", err)
		}
		os.Exit(1)
	}
	if err := benchmark.WriteMarkdown(rep, os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "postern-gatewaybench:", err)
		os.Exit(1)
	}
}
