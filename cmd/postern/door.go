package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/policy"
)

var doorFlags struct {
	policy   string
	listen   string
	addHosts []string
	resolver string
	run      string
}

var doorCmd = &cobra.Command{
	Use:   "door --policy FILE --listen ADDR",
	Short: "Serve the door as an explicit proxy (HTTP CONNECT and absolute-URI HTTP), judging every connection by a policy",
	Long: `Serve the door as an explicit proxy on --listen. Every CONNECT and every
absolute-URI request is judged by the policy; each decision is printed on
stdout as one JSON event per line. Logs go to stderr. SIGTERM or SIGINT stops
accepting and lets open connections drain.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		if doorFlags.policy == "" {
			return &exitError{code: 2, err: fmt.Errorf("--policy is required: the door judges by a policy file (see examples/policies)")}
		}
		pol, err := policy.Load(doorFlags.policy)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		pins := map[string][]netip.Addr{}
		for _, s := range doorFlags.addHosts {
			name, addr, err := door.ParseAddHost(s)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			pins[name] = append(pins[name], addr)
		}
		if doorFlags.resolver != "" {
			if _, _, err := net.SplitHostPort(doorFlags.resolver); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--resolver %q: write host:port, e.g. 10.0.0.53:53", doorFlags.resolver)}
			}
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
		var mu sync.Mutex
		enc := json.NewEncoder(os.Stdout)
		d, err := door.New(door.Config{
			Policy:   pol,
			Resolver: doorFlags.resolver,
			AddHosts: pins,
			Run:      doorFlags.run,
			Logger:   logger,
			Emit: func(ev door.Event) {
				mu.Lock()
				defer mu.Unlock()
				enc.Encode(ev)
			},
		})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		ln, err := net.Listen("tcp", doorFlags.listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w (pick a free address with --listen, e.g. 127.0.0.1:0)", doorFlags.listen, err)
		}
		logger.Info("door listening", "addr", ln.Addr().String(), "policy", pol.Source, "mode", pol.Mode.String())
		return d.Run(cmd.Context(), door.Listeners{Proxy: ln})
	},
}

func init() {
	f := doorCmd.Flags()
	f.StringVar(&doorFlags.policy, "policy", "", "policy file (HCL)")
	f.StringVar(&doorFlags.listen, "listen", "127.0.0.1:3128", "address to serve the explicit proxy on")
	f.StringArrayVar(&doorFlags.addHosts, "add-host", nil, "pin NAME:IP (repeatable; IPv6 as NAME:[2001:db8::1])")
	f.StringVar(&doorFlags.resolver, "resolver", "", "DNS server host:port for the door's own lookups (default: the system resolver)")
	f.StringVar(&doorFlags.run, "run", "", "run id copied into every event")
	rootCmd.AddCommand(doorCmd)
}
