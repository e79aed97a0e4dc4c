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
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/probe/rung"
	"github.com/postern-dev/postern/records"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// machineView is a machine with what was last measured about it.
type machineView struct {
	Name string `json:"name"`
	// SSH is the ssh destination, "" for local.
	SSH        string                   `json:"ssh"`
	Labels     map[string]string        `json:"labels"`
	AgentDir   string                   `json:"agent_dir"` // "" is the default, ~/.cache/postern/agents
	Lane       machine.Lane             `json:"lane"`
	Carry      string                   `json:"carry"` // what a run would get now, "none" if refused
	Measured   bool                     `json:"measured"`
	MeasuredAt *time.Time               `json:"measured_at"`
	OS         string                   `json:"os"`
	Arch       string                   `json:"arch"`
	Kernel     string                   `json:"kernel"`
	Version    string                   `json:"postern_version"`
	User       string                   `json:"user"`
	TookMS     int64                    `json:"took_ms"`
	Rungs      map[rung.Name]probe.Rung `json:"rungs"`
	// Agents are what was measured over sftp of the agents installed there.
	Agents []agent.FileState `json:"agents"`
	// Env names the variables every run on the machine is given (names
	// only: the values are postern's environment's at each run).
	Env []string `json:"env"`
}

func viewMachine(store *records.Store, m machine.Machine) (machineView, error) {
	v := machineView{Name: m.Name, SSH: m.SSH, Labels: m.Labels, AgentDir: m.AgentDir, Rungs: map[rung.Name]probe.Rung{}, Agents: []agent.FileState{}}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
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
		agents, err := store.Agents(m.Name)
		if err != nil {
			return v, err
		}
		v.Agents = append(v.Agents, agents...)
	}
	v.Env = append([]string{}, m.Env...)
	v.Lane = m.Lane(goos)
	v.Carry = string(carry.None)
	if c, err := carry.Choose(rec, carry.Spec{Machine: m.Name, Lane: v.Lane}); err == nil {
		v.Carry = string(c.Carry())
	}
	return v, nil
}

// printMachine prints a machine and its rungs. With width > 0 each rung's
// detail and remedy are shortened so that its row fits in width columns;
// 0 prints them whole.
func printMachine(v machineView, width int) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "machine\t%s\n", v.Name)
	if v.SSH != "" {
		fmt.Fprintf(tw, "ssh\t%s\n", v.SSH)
	}
	if len(v.Labels) > 0 {
		keys := make([]string, 0, len(v.Labels))
		for k := range v.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, len(keys))
		for i, k := range keys {
			pairs[i] = k + "=" + v.Labels[k]
		}
		fmt.Fprintf(tw, "labels\t%s\n", strings.Join(pairs, ", "))
	}
	if v.AgentDir != "" {
		fmt.Fprintf(tw, "agent dir\t%s\n", v.AgentDir)
	}
	fmt.Fprintf(tw, "lane\t%s\n", v.Lane)
	fmt.Fprintf(tw, "carry\t%s\n", v.Carry)
	if len(v.Env) > 0 {
		fmt.Fprintf(tw, "env\t%s (passed to every run, values from postern's environment)\n", strings.Join(v.Env, ", "))
	}
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
	nameW, resultW := len("RUNG"), len("RESULT")
	for n, g := range v.Rungs {
		names = append(names, string(n))
		nameW, resultW = max(nameW, len(string(n))), max(resultW, len(string(g.Result)))
	}
	sort.Strings(names)
	// Shortened, a row is at most width columns: the detail of a rung with
	// a remedy gets up to three fifths of the room, the remedy the rest; a
	// rung without one ends its row with its detail (no trailing padding).
	room := max(width-nameW-resultW-4, 24)
	detailW := 0
	for _, g := range v.Rungs {
		if g.Remedy != "" {
			detailW = max(detailW, utf8.RuneCountInString(termtext.Printable(g.Detail)))
		}
	}
	detailW = min(detailW, room*3/5)
	shortened := false
	for _, n := range names {
		g := v.Rungs[rung.Name(n)]
		detail, remedy := termtext.Printable(g.Detail), termtext.Printable(g.Remedy)
		if width > 0 {
			d, r := cut(detail, room), ""
			if remedy != "" {
				d, r = cut(detail, detailW), cut(remedy, room-detailW-2)
			}
			shortened = shortened || d != detail || r != remedy
			detail, remedy = d, r
		}
		if remedy == "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n, g.Result, detail)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, g.Result, detail, remedy)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shortened {
		fmt.Printf("(details shortened to %d columns: 'postern machine show %s' and --json have them whole)\n", width, v.Name)
	}
	return nil
}

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return "…"
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}

// outputWidth is the terminal's width when stdout is one, else 120.
func outputWidth() int {
	if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 {
		return w
	}
	return 120
}

// rungsByResult are the names of the rungs that answered yes and of those
// that did not, each sorted.
func rungsByResult(rungs map[rung.Name]probe.Rung) (yes, no []string) {
	for n, g := range rungs {
		if g.Result == probe.Yes {
			yes = append(yes, string(n))
		} else {
			no = append(no, string(n))
		}
	}
	sort.Strings(yes)
	sort.Strings(no)
	return yes, no
}

// printSummary is the one table measuring several machines ends with.
func printSummary(views []machineView) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLANE\tCARRY\tTOOK\tRUNGS YES\tRUNGS NO")
	for _, v := range views {
		yes, no := rungsByResult(v.Rungs)
		nos := strings.Join(no, ",")
		if nos == "" {
			nos = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", v.Name, v.Lane, v.Carry, (time.Duration(v.TookMS) * time.Millisecond).String(), len(yes), nos)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("(each machine's rungs, detail and remedy: 'postern machine show NAME')")
	return nil
}

func init() {
	buildCommands = append(buildCommands, func() {
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
					yes, no := rungsByResult(v.Rungs)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Lane, v.Carry, measured, strings.Join(yes, ","), strings.Join(no, ","))
				}
				return tw.Flush()
			},
		}
		list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array")

		var showJSON bool
		show := &cobra.Command{
			Use:               "show NAME",
			Short:             "Show a machine and its last measured record",
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: completeMachines,
			RunE: func(cmd *cobra.Command, args []string) error {
				store, mm, err := openMachine(args[0])
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
				if err := printMachine(v, 0); err != nil {
					return err
				}
				return printKeptWorkspaces(os.Stdout, store, mm.Name)
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
			ValidArgsFunction: completeMoreMachines,
			RunE: func(cmd *cobra.Command, args []string) error {
				store, err := openStore()
				if err != nil {
					return err
				}
				logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
				// Remote machines are measured through their agent (machine_remote.go).
				// Machines measured are printed even when others failed.
				views, perr := probeMachines(cmd.Context(), store, args, probeAll, withSSHConfig(sshclient.Options{TrustNewHostKey: trustNewHostKey, ConnectTimeout: probeConnectTimeout}), logger)
				if len(views) == 0 {
					return perr
				}
				if probeJSON {
					if !probeAll && len(args) <= 1 {
						return errors.Join(writeJSON(os.Stdout, views[0]), perr)
					}
					return errors.Join(writeJSON(os.Stdout, views), perr)
				}
				if probeAll || len(args) > 1 {
					return errors.Join(printSummary(views), perr)
				}
				return errors.Join(printMachine(views[0], outputWidth()), perr)
			},
		}
		probeCmd.Flags().BoolVar(&probeJSON, "json", false, "print what was measured as JSON")

		probeCmd.Flags().BoolVar(&probeAll, "all", false, "measure every machine, concurrently")
		probeCmd.Flags().DurationVar(&probeConnectTimeout, "connect-timeout", 0, "bound on each ssh connect and handshake (default: the ssh config's ConnectTimeout, else 15s)")
		probeCmd.Flags().BoolVar(&trustNewHostKey, "trust-new-host-key", false, "accept and record the ssh host key of a machine known_hosts does not list yet (a changed key is never accepted)")

		var (
			dest, identity, agentDir string
			labels                   []string
			envNames                 []string
			addCheck, addTrust       bool
			addConnectTimeout        time.Duration
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
				for _, n := range envNames {
					if err := machine.CheckEnvName(n); err != nil {
						return &exitError{2, fmt.Errorf("--env: %w", err)}
					}
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
				sshOpts := withSSHConfig(sshclient.Options{Identity: identity, TrustNewHostKey: addTrust, ConnectTimeout: addConnectTimeout})
				res, err := sshclient.ResolveDest(cmd.Context(), dest, sshOpts, nil)
				if err != nil {
					return &exitError{2, fmt.Errorf("machine %s: %w", name, err)}
				}
				if addCheck {
					if err := checkConnect(cmd.Context(), dest, sshOpts); err != nil {
						return fmt.Errorf("machine %s: %w; it was not added", name, err)
					}
				}
				mm := machine.Machine{Name: name, SSH: dest, Identity: identity, AgentDir: agentDir, Labels: lm, Env: envNames, AddedAt: time.Now().UTC()}
				if err := store.PutMachine(mm); err != nil {
					return err
				}
				fmt.Printf("added %s (%s, %s); it is unmeasured: runs on it are refused until 'postern machine probe-confinement %s'\n", name, dest, resolvedText(res, addCheck), name)
				return nil
			},
		}
		add.Flags().StringVar(&dest, "ssh", "", "ssh destination: an alias from ~/.ssh/config or [user@]host[:port]")
		add.Flags().StringVar(&identity, "identity", "", "private key file")
		add.Flags().StringArrayVar(&labels, "label", nil, "label key=value (repeatable)")
		add.Flags().StringArrayVar(&envNames, "env", nil, "pass the variable NAME to every run on the machine, its value taken from postern's environment at each run; names only, never stored with a value (repeatable)")
		add.Flags().BoolVar(&addCheck, "check", false, "also connect and log in over ssh before adding it")
		add.Flags().BoolVar(&addTrust, "trust-new-host-key", false, "with --check: accept and record the host key of a machine known_hosts does not list yet")
		add.Flags().DurationVar(&addConnectTimeout, "connect-timeout", 0, "with --check: bound on the ssh connect and handshake (default: the ssh config's ConnectTimeout, else 15s)")
		add.Flags().StringVar(&agentDir, "agent-dir", "", "directory on the machine for postern's agent (default ~/.cache/postern/agents); use one that allows executables")

		var rmClean, rmTrust bool
		rm := &cobra.Command{
			Use:   "rm NAME",
			Short: "Remove a machine and its record (--clean: and what postern left on it)",
			Long: `Remove a machine and its record. What postern installed there stays unless --clean is
given: then the machine's agents and probe images are removed first, as 'postern machine clean'
does, and the machine is forgotten only once that worked.`,
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: completeMachines,
			RunE: func(cmd *cobra.Command, args []string) error {
				store, mm, err := openMachine(args[0])
				if err != nil {
					return err
				}
				if rmClean && !mm.IsLocal() {
					found, err := cleanMachine(cmd, store, mm, false, rmTrust)
					printLeftovers(os.Stdout, mm.Name, found, false)
					if err != nil {
						return fmt.Errorf("%w; %s is still known: mend that and run 'postern machine rm --clean %s' again, or 'postern machine rm %s' to forget it as it is", err, mm.Name, mm.Name, mm.Name)
					}
				}
				if err := store.RemoveMachine(mm.Name); err != nil {
					return err
				}
				fmt.Printf("removed %s\n", mm.Name)
				if !rmClean && !mm.IsLocal() {
					fmt.Fprintf(os.Stderr, "postern: what postern installed on %s stays there (its agents, about 12 MB each); 'postern machine rm --clean %s' removes it with the machine\n", mm.Name, mm.Name)
				}
				return nil
			},
		}
		rm.Flags().BoolVar(&rmClean, "clean", false, "first remove the machine's agents and probe images, as 'postern machine clean' does")
		rm.Flags().BoolVar(&rmTrust, "trust-new-host-key", false, "with --clean: accept and record the ssh host key of a machine known_hosts does not list yet")

		m.AddCommand(list, show, probeCmd, add, rm, importCommand(), cleanCommand())
		rootCmd.AddCommand(m)
	})
}
