// Command demo shows postern at work, offline: it measures this machine, starts
// test hosts in network namespaces, runs a small agent script behind the wall
// under examples/policies/demo.hcl, and prints what got through, what was
// stopped, what the door recorded and what the test DNS server was asked.
//
// It exits non-zero if anything went otherwise than the policy says, so it
// doubles as a smoke test. It needs root and a built postern:
//
//	make demo
//	go run ./examples/demo -postern bin/postern
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.Postern, "postern", "bin/postern", "the built postern binary")
	flag.StringVar(&cfg.Root, "root", ".", "the source tree (holds examples/)")
	flag.StringVar(&cfg.State, "state", "bin/demo-state", "POSTERN_HOME for the demo's records")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := demo(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
