package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/probe/rung"
	"github.com/postern-dev/postern/records"
	agent "github.com/postern-dev/postern/remote-agent"
)

// machineView is a machine with what was last measured about it.
type machineView struct {
	Name       string                   `json:"name"`
	SSH        string                   `json:"ssh,omitempty"`
	Labels     map[string]string        `json:"labels,omitempty"`
	Lane       machine.Lane             `json:"lane"`
	Carry      string                   `json:"carry"` // what a run would get now, "none" if refused
	Measured   bool                     `json:"measured"`
	MeasuredAt *time.Time               `json:"measured_at"`
	OS         string                   `json:"os,omitempty"`
	Arch       string                   `json:"arch,omitempty"`
	Kernel     string                   `json:"kernel,omitempty"`
	Version    string                   `json:"postern_version,omitempty"`
	User       string                   `json:"user,omitempty"`
	TookMS     int64                    `json:"took_ms,omitempty"`
	Rungs      map[rung.Name]probe.Rung `json:"rungs"`
	// Agents are what was measured over sftp of the agents installed there.
	Agents []agent.FileState `json:"agents,omitempty"`
}

func viewMachine(store *records.Store, m machine.Machine) (machineView, error) {
	v := machineView{Name: m.Name, SSH: m.SSH, Labels: m.Labels, Rungs: map[rung.Name]probe.Rung{}}
	rec, err := store.Record(m.Name)
	if err != nil && !errors.Is(err, records.ErrNotFound) {
		return v, err
	}
	goos := ""
	if rec != nil {
		goos = rec.OS
		t := rec.MeasuredAt
		v.Measured, v.MeasuredAt = true, &t
		v.OS, v.Arch, v.Kernel, v.Version, v.User, v.TookMS = rec.OS, rec.Arch, rec.Kernel, rec.Version, rec.User, rec.TookMS
		v.Rungs = rec.Rungs
	}
	if !m.IsLocal() {
		if v.Agents, err = store.Agents(m.Name); err != nil {
			return v, err
		}
	}
	v.Lane = m.Lane(goos)
	c, err := carry.Choose(rec, carry.Spec{Machine: m.Name, Lane: v.Lane})
	if err != nil {
		c = carry.None
	}
	v.Carry = string(c)
	return v, nil
}

func printMachine(v machineView) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "machine\t%s\n", v.Name)
	if v.SSH != "" {
		fmt.Fprintf(tw, "ssh\t%s\n", v.SSH)
	}
	fmt.Fprintf(tw, "lane\t%s\n", v.Lane)
	fmt.Fprintf(tw, "carry\t%s\n", v.Carry)
	if !v.Measured {
		fmt.Fprintf(tw, "measured\tnever: runs are refused; run 'postern machine probe-confinement %s'\n", v.Name)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "measured\t%s (took %d ms, as %s)\n", v.MeasuredAt.Local().Format(time.RFC3339), v.TookMS, v.User)
	fmt.Fprintf(tw, "host\t%s/%s, kernel %s, postern %s\n", v.OS, v.Arch, v.Kernel, v.Version)
	for _, a := range v.Agents {
		// The path was found on the remote: shown as printable text.
		fmt.Fprintf(tw, "agent\t%s: %d bytes, %s, modified %s, checked %s\n", termtext.Printable(a.Path), a.Size, os.FileMode(a.Mode),
			time.Unix(a.Mtime, 0).Local().Format(time.RFC3339), a.MeasuredAt.Local().Format(time.RFC3339))
	}
	fmt.Fprintln(tw, "\nRUNG\tRESULT\tDETAIL\tREMEDY")
	names := make([]string, 0, len(v.Rungs))
	for n := range v.Rungs {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		g := v.Rungs[rung.Name(n)]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, g.Result, g.Detail, g.Remedy)
	}
	return tw.Flush()
}

func init() {
	m := &cobra.Command{Use: "machine", Short: "Add, list, show and measure machines"}

	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List machines and what was measured about them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			ms, err := store.Machines()
			if err != nil {
				return err
			}
			views := make([]machineView, 0, len(ms))
			for _, mm := range ms {
				v, err := viewMachine(store, mm)
				if err != nil {
					return err
				}
				views = append(views, v)
			}
			if listJSON {
				return writeJSON(os.Stdout, views)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tLANE\tCARRY\tMEASURED\tRUNGS YES\tRUNGS NO")
			for _, v := range views {
				measured := "never"
				if v.Measured {
					measured = v.MeasuredAt.Local().Format(time.DateTime)
				}
				var yes, no []string
				for n, g := range v.Rungs {
					if g.Result == probe.Yes {
						yes = append(yes, string(n))
					} else {
						no = append(no, string(n))
					}
				}
				sort.Strings(yes)
				sort.Strings(no)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Lane, v.Carry, measured, strings.Join(yes, ","), strings.Join(no, ","))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a machine and its last measured record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			mm, err := store.Machine(args[0])
			if err != nil {
				return err
			}
			v, err := viewMachine(store, mm)
			if err != nil {
				return err
			}
			if showJSON {
				return writeJSON(os.Stdout, v)
			}
			return printMachine(v)
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	var probeJSON, probeAll, trustNewHostKey bool
	var probeConnectTimeout time.Duration
	probeCmd := &cobra.Command{
		Use:   "probe-confinement [NAME...]",
		Short: "Measure what a machine can wall, by performing each act, and record it",
		Long: `Measure what a machine can wall, by performing each act, and record it.

Each rung is measured by doing it for real: create a user and network namespace, redirect a
connection with nftables and read its original destination, over IPv4 and IPv6, ask Landlock its
ABI. The record is the only thing that decides which wall a run gets. Without NAME, measures local.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			// Remote machines are measured through their agent (machine_remote.go).
			// Machines measured are printed even when others failed.
			views, perr := probeMachines(cmd.Context(), store, args, probeAll, sshclient.Options{TrustNewHostKey: trustNewHostKey, ConnectTimeout: probeConnectTimeout}, logger)
			if len(views) == 0 {
				return perr
			}
			if probeJSON {
				if !probeAll && len(args) <= 1 {
					return errors.Join(writeJSON(os.Stdout, views[0]), perr)
				}
				return errors.Join(writeJSON(os.Stdout, views), perr)
			}
			for i, v := range views {
				if i > 0 {
					fmt.Println()
				}
				if err := printMachine(v); err != nil {
					return err
				}
			}
			return perr
		},
	}
	probeCmd.Flags().BoolVar(&probeJSON, "json", false, "print what was measured as JSON")

	probeCmd.Flags().BoolVar(&probeAll, "all", false, "measure every machine, concurrently")
	probeCmd.Flags().DurationVar(&probeConnectTimeout, "connect-timeout", 0, "bound on each ssh connect and handshake (default: the ssh config's ConnectTimeout, else 15s)")
	probeCmd.Flags().BoolVar(&trustNewHostKey, "trust-new-host-key", false, "accept and record the ssh host key of a machine known_hosts does not list yet (a changed key is never accepted)")

	var (
		dest, identity, agentDir string
		labels                   []string
	)
	add := &cobra.Command{
		Use:   "add NAME --ssh DEST",
		Short: "Add a machine reached over ssh (it stays unmeasured until probed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := machine.CheckName(name); err != nil {
				return &exitError{2, err}
			}
			if name == machine.Local {
				return &exitError{2, errors.New("local exists without being added")}
			}
			if dest == "" {
				return &exitError{2, errors.New("--ssh DEST is required: an alias from ~/.ssh/config or [user@]host[:port]")}
			}
			lm := map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return &exitError{2, fmt.Errorf("label %q: write it as key=value", l)}
				}
				lm[k] = v
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			if _, err := store.Machine(name); err == nil {
				return fmt.Errorf("machine %q exists; remove it first with 'postern machine rm %s'", name, name)
			}
			if _, err := machine.ParseDest(dest); err != nil {
				return &exitError{2, err}
			}
			mm := machine.Machine{Name: name, SSH: dest, Identity: identity, AgentDir: agentDir, Labels: lm, AddedAt: time.Now().UTC()}
			if err := store.PutMachine(mm); err != nil {
				return err
			}
			fmt.Printf("added %s (%s); it is unmeasured: runs on it are refused until 'postern machine probe-confinement %s'\n", name, dest, name)
			return nil
		},
	}
	add.Flags().StringVar(&dest, "ssh", "", "ssh destination: an alias from ~/.ssh/config or [user@]host[:port]")
	add.Flags().StringVar(&identity, "identity", "", "private key file")
	add.Flags().StringArrayVar(&labels, "label", nil, "label key=value (repeatable)")
	add.Flags().StringVar(&agentDir, "agent-dir", "", "directory on the machine for postern's agent (default ~/.cache/postern/agents); use one that allows executables")

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a machine and its record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			return store.RemoveMachine(args[0])
		},
	}

	m.AddCommand(list, show, probeCmd, add, rm, importCommand())
	rootCmd.AddCommand(m)
}
