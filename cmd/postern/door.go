package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

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
	upstream string
	caOut    string
	proxy    string
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
		leaveCoresToTheRun()
		var up *door.Upstream
		if doorFlags.proxy != "" {
			var err error
			if up, err = door.ParseUpstream(doorFlags.proxy); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		if doorFlags.policy == "" && up == nil {
			return &exitError{code: 2, err: fmt.Errorf("--policy is required: the door judges by a policy file (see examples/policies)")}
		}
		pol := policy.Nothing()
		if doorFlags.policy != "" {
			var err error
			if pol, err = policy.Load(doorFlags.policy); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		if up != nil {
			pol.Source = "upstream proxy " + up.Name
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
		// Each decision is an event line on stdout; stderr gets the door's
		// warnings, not a second line per decision.
		doorLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		events := newEventPrinter(os.Stdout)
		defer events.Close()
		d, err := door.New(door.Config{
			Policy:        pol,
			Resolver:      doorFlags.resolver,
			AddHosts:      pins,
			Run:           doorFlags.run,
			Logger:        doorLog,
			Emit:          events.Emit,
			UpstreamRoots: doorFlags.upstream,
			Upstream:      up,
		})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if doorFlags.caOut != "" {
			pem := d.AuthorityPEM()
			if pem == nil {
				return &exitError{code: 2, err: fmt.Errorf("--ca-out: the policy inspects no host, so the door has no certificate authority to write")}
			}
			if err := os.WriteFile(doorFlags.caOut, pem, 0o644); err != nil {
				return fmt.Errorf("--ca-out: %w", err)
			}
		}
		// No TCP keep-alive on client connections: the client is on this
		// machine or in the run, and the setsockopts cost every accept.
		lc := net.ListenConfig{KeepAlive: -1}
		ln, err := lc.Listen(cmd.Context(), "tcp", doorFlags.listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w (pick a free address with --listen, e.g. 127.0.0.1:0)", doorFlags.listen, err)
		}
		logger.Info("door listening", "addr", ln.Addr().String(), "policy", pol.Source, "mode", pol.Mode.String())
		return d.Run(cmd.Context(), door.Listeners{Proxy: ln})
	},
}

// eventPrinter writes events as JSON lines on its writer, in order. Emit
// queues an admitted connection's events; whatever is queued is encoded and
// written together at most printDelay later, in one write, so a connection
// neither waits on stdout nor wakes a writer for each event. A denial is
// written at once (with what was queued before it): it is what a person
// watching the door looks for, and the client is being refused anyway.
type eventPrinter struct {
	w io.Writer

	mu      sync.Mutex
	pending []door.Event
	armed   bool // a flush is scheduled
	closed  bool

	wmu sync.Mutex // one flush at a time, in order
	out bytes.Buffer
}

const printDelay = 5 * time.Millisecond

func newEventPrinter(w io.Writer) *eventPrinter { return &eventPrinter{w: w} }

func (p *eventPrinter) Emit(ev door.Event) {
	p.mu.Lock()
	p.pending = append(p.pending, ev)
	arm := !p.armed && !p.closed
	if arm {
		p.armed = true
	}
	now := p.closed || ev.Decision == "deny"
	p.mu.Unlock()
	switch {
	case now:
		p.flush()
	case arm:
		time.AfterFunc(printDelay, p.flush)
	}
}

func (p *eventPrinter) flush() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	evs := p.pending
	p.pending = nil
	p.armed = false
	p.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	p.out.Reset()
	enc := json.NewEncoder(&p.out)
	for _, ev := range evs {
		enc.Encode(ev)
	}
	p.w.Write(p.out.Bytes())
}

// Close writes every event emitted so far; later events are written at once.
func (p *eventPrinter) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.flush()
}

func init() {
	buildCommands = append(buildCommands, func() {
		f := doorCmd.Flags()
		f.StringVar(&doorFlags.policy, "policy", "", "policy file (HCL)")
		f.StringVar(&doorFlags.listen, "listen", "127.0.0.1:3128", "address to serve the explicit proxy on")
		f.StringArrayVar(&doorFlags.addHosts, "add-host", nil, "pin NAME:IP (repeatable; IPv6 as NAME:[2001:db8::1])")
		f.StringVar(&doorFlags.resolver, "resolver", "", "DNS server host:port for the door's own lookups (default: the system resolver)")
		f.StringVar(&doorFlags.run, "run", "", "run id copied into every event")
		f.StringVar(&doorFlags.upstream, "upstream-ca", "", "PEM file of certificate authorities trusted, besides this machine's, when verifying a host the policy inspects")
		f.StringVar(&doorFlags.caOut, "ca-out", "", "write the certificate (PEM) of the authority the door shows inspected hosts with, for clients to trust")
		f.StringVar(&doorFlags.proxy, "upstream-proxy", "", "send every connection on to this proxy, http://[NAME:TOKEN@]HOST:PORT, instead of judging it (a gateway, or a corporate proxy); literal addresses on the hard floor are still refused")
		rootCmd.AddCommand(doorCmd)
	})
}
