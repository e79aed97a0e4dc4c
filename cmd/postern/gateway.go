package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/gateway"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

var gatewayFlags struct {
	policy          string
	listen          string
	api             string
	apiTokenFile    string
	addHosts        []string
	resolver        string
	eventsPerClient int
}

var gatewayCmd = &cobra.Command{
	Use:   "gateway --policy DEFAULT.hcl --listen ADDR --api ADDR",
	Short: "Serve one door for many clients, each named by its proxy credentials and judged by its own policy",
	Long: `Serve one door for many clients. Each connection to --listen is attributed to
a client by its proxy credentials (HTTPS_PROXY=http://NAME:TOKEN@HOST:PORT) and
judged by that client's policy, or by --policy for a client without one. The
management API and the dashboard are served on --api (loopback unless told
otherwise); every API route needs the token in --api-token-file (made, mode
0600, if absent). Clients and their policies are kept in the records, so they
survive a restart; 'postern gateway clients' changes them beside a running
gateway, which takes the change up within a quarter of a second.

Each decision is printed on stdout as one JSON event per line; logs and the
dashboard's address go to stderr.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		leaveCoresToTheRun()
		pol := policy.Nothing()
		if gatewayFlags.policy != "" {
			var err error
			if pol, err = policy.Load(gatewayFlags.policy); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		pins, err := parsePinFlags(gatewayFlags.addHosts)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if gatewayFlags.resolver != "" {
			if _, _, err := net.SplitHostPort(gatewayFlags.resolver); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--resolver %q: write host:port, e.g. 10.0.0.53:53", gatewayFlags.resolver)}
			}
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		tokenFile := gatewayFlags.apiTokenFile
		if tokenFile == "" {
			tokenFile = filepath.Join(filepath.Dir(store.Path()), "gateway-api-token")
		}
		token, created, err := gateway.APIToken(tokenFile)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
		events := newEventPrinter(os.Stdout)
		defer events.Close()
		g, err := gateway.New(gateway.Config{
			Store:           store,
			Default:         pol,
			APIToken:        token,
			Resolver:        gatewayFlags.resolver,
			AddHosts:        pins,
			EventsPerClient: gatewayFlags.eventsPerClient,
			Emit:            events.Emit,
			Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		lc := net.ListenConfig{KeepAlive: -1}
		pl, err := lc.Listen(cmd.Context(), "tcp", gatewayFlags.listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w (pick a free address with --listen, e.g. 127.0.0.1:0)", gatewayFlags.listen, err)
		}
		al, err := lc.Listen(cmd.Context(), "tcp", gatewayFlags.api)
		if err != nil {
			pl.Close()
			return fmt.Errorf("listen on %s: %w (pick a free address with --api, e.g. 127.0.0.1:0)", gatewayFlags.api, err)
		}
		if !gateway.IsLoopback(al.Addr().String()) {
			logger.Warn("THE GATEWAY'S API IS NOT ON LOOPBACK: anyone who can reach " + al.Addr().String() +
				" and has the API token can change every client's policy; give --api 127.0.0.1:PORT unless you mean it")
		}
		if created {
			logger.Info("gateway api token made", "file", tokenFile)
		}
		logger.Info("gateway listening", "addr", pl.Addr().String(), "api", al.Addr().String(),
			"policy", pol.Source, "mode", pol.Mode.String(), "token_file", tokenFile)
		fmt.Fprintf(os.Stderr, "postern gateway: dashboard at http://%s/#token=%s\n", dashboardHost(al.Addr()), token)
		return g.Run(cmd.Context(), gateway.Listeners{Proxy: pl, API: al})
	},
}

// dashboardHost is the host:port to print for the API: an unspecified
// address is shown as loopback, where a browser on this machine finds it.
func dashboardHost(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	if ap.Addr().IsUnspecified() {
		return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port()).String()
	}
	return ap.String()
}

func parsePinFlags(flags []string) (map[string][]netip.Addr, error) {
	pins := map[string][]netip.Addr{}
	for _, s := range flags {
		name, addr, err := door.ParseAddHost(s)
		if err != nil {
			return nil, err
		}
		pins[name] = append(pins[name], addr)
	}
	return pins, nil
}

var gatewayClientsCmd = &cobra.Command{
	Use:   "clients",
	Short: "Add, list and remove the gateway's clients in the records (a running gateway takes changes up at once)",
}

var gatewayClientsAddCmd = &cobra.Command{
	Use:   "add NAME",
	Short: "Add a client and print its token (shown this once)",
	Args:  cobra.ExactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		store, err := openStore()
		if err != nil {
			return err
		}
		nc, err := gateway.AddClient(store, args[0])
		switch {
		case errors.Is(err, gateway.ErrBadName):
			return &exitError{code: 2, err: err}
		case errors.Is(err, records.ErrExists):
			return &exitError{code: 1, err: fmt.Errorf("%w; remove it first with 'postern gateway clients rm %s', or rotate its token through the API", err, args[0])}
		case err != nil:
			return err
		}
		fmt.Fprintf(os.Stdout, "%s\n", nc.Token)
		fmt.Fprintf(os.Stderr, "postern: client %s added; it connects with HTTPS_PROXY=http://%s:TOKEN@GATEWAY:PORT (the token above is not stored and is not shown again)\n", nc.Name, nc.Name)
		return nil
	},
}

var gatewayClientsListCmd = &cobra.Command{
	Use:   "list",
	Short: "List the clients and the policy each is judged by",
	Args:  cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		store, err := openStore()
		if err != nil {
			return err
		}
		def := policy.Nothing()
		if gatewayListPolicy != "" {
			if def, err = policy.Load(gatewayListPolicy); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		infos, err := gateway.ListClients(store, def)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPOLICY\tMODE\tALLOW\tDENY\tCREATED")
		for _, c := range infos {
			src := "default"
			if c.OwnPolicy {
				src = "own"
			}
			allow, deny := "-", "-"
			if c.OwnPolicy {
				allow, deny = listOrDash(c.Policy.Allow), listOrDash(c.Policy.Deny)
			}
			mode := c.Policy.Mode
			if !c.OwnPolicy {
				mode = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, src, mode, allow, deny, c.CreatedAt.Format("2006-01-02 15:04:05Z"))
		}
		return tw.Flush()
	},
}

var gatewayListPolicy string

func listOrDash(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

var gatewayClientsRmCmd = &cobra.Command{
	Use:   "rm NAME",
	Short: "Remove a client: its credentials stop working",
	Args:  cobra.ExactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		store, err := openStore()
		if err != nil {
			return err
		}
		if err := gateway.RemoveClient(store, args[0]); err != nil {
			if errors.Is(err, records.ErrNotFound) {
				return &exitError{code: 1, err: fmt.Errorf("%w; see 'postern gateway clients list'", err)}
			}
			return err
		}
		fmt.Fprintf(os.Stderr, "postern: client %s removed\n", args[0])
		return nil
	},
}

func init() {
	buildCommands = append(buildCommands, func() {
		f := gatewayCmd.Flags()
		f.StringVar(&gatewayFlags.policy, "policy", "", "default policy file (HCL) for clients without their own; without it they may reach nothing")
		f.StringVar(&gatewayFlags.listen, "listen", "127.0.0.1:3128", "address to serve the clients' proxy on")
		f.StringVar(&gatewayFlags.api, "api", "127.0.0.1:9090", "address to serve the management API and the dashboard on")
		f.StringVar(&gatewayFlags.apiTokenFile, "api-token-file", "", "file holding the API token, made (mode 0600) if absent (default: gateway-api-token beside the records)")
		f.StringArrayVar(&gatewayFlags.addHosts, "add-host", nil, "pin NAME:IP for the gateway's lookups (repeatable)")
		f.StringVar(&gatewayFlags.resolver, "resolver", "", "DNS server host:port for the gateway's lookups (default: the system resolver)")
		f.IntVar(&gatewayFlags.eventsPerClient, "events-per-client", gateway.DefaultEventsPerClient, "events kept in memory for each client, for /v1/events")
		gatewayClientsListCmd.Flags().StringVar(&gatewayListPolicy, "policy", "", "the gateway's default policy file, to show what clients without their own are judged by")
		gatewayClientsCmd.AddCommand(gatewayClientsAddCmd, gatewayClientsListCmd, gatewayClientsRmCmd)
		gatewayCmd.AddCommand(gatewayClientsCmd)
		rootCmd.AddCommand(gatewayCmd)
	})
}
