package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/records"
)

func cleanCommand() *cobra.Command {
	var (
		dryRun, asJSON, trust bool
	)
	cmd := &cobra.Command{
		Use:   "clean NAME",
		Short: "Remove what postern left on a machine: its agents and the probe's container images",
		Long: `Remove what postern left on a machine: every version of its agent under the machine's
agent directory (~/.cache/postern/agents unless agent_dir says otherwise) and the image the
probe imports into podman or docker (localhost/postern-probe:…); on local, the probe's images.
What is removed is listed; --dry-run lists it and removes nothing. The next run or probe installs
the agent again. Installing already keeps only the two newest versions.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeMachines,
		RunE: func(cmd *cobra.Command, args []string) error {
			store, m, err := openMachine(args[0])
			if err != nil {
				return err
			}
			found, err := cleanMachine(cmd, store, m, dryRun, trust)
			if asJSON {
				if found == nil {
					found = []dispatch.Leftover{}
				}
				if jerr := writeJSON(os.Stdout, found); jerr != nil {
					return jerr
				}
				return err
			}
			printLeftovers(os.Stdout, m.Name, found, dryRun)
			return err
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was found as a JSON array")
	cmd.Flags().BoolVar(&trust, "trust-new-host-key", false, "accept and record the ssh host key of a machine known_hosts does not list yet")
	return cmd
}

func cleanMachine(cmd *cobra.Command, store *records.Store, m machine.Machine, dryRun, trust bool) ([]dispatch.Leftover, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := dispatch.Remote{SSH: withSSHConfig(sshclient.Options{TrustNewHostKey: trust, Logger: logger}), Agents: store, Warn: os.Stderr}
	return dispatch.CleanRemote(cmd.Context(), m, r, dryRun)
}

func printLeftovers(w io.Writer, name string, found []dispatch.Leftover, dryRun bool) {
	if len(found) == 0 {
		fmt.Fprintf(w, "nothing of postern's found on %s\n", name)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tKIND\tSIZE\tWHAT")
	var kib int64
	for _, l := range found {
		state := "removed"
		switch {
		case dryRun:
			state = "would remove"
		case !l.Removed:
			state = "not removed"
		}
		size := "-"
		if l.KiB >= 0 {
			size = fmt.Sprintf("%.1f MB", float64(l.KiB)*1024/1e6)
			kib += l.KiB
		}
		what := termtext.Printable(l.What) // found on the remote
		if l.Engine != "" {
			what += " (" + l.Engine + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", state, l.Kind, size, what)
	}
	tw.Flush()
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(w, "%s %d item(s) from %s, %.1f MB of agents\n", verb, len(found), name, float64(kib)*1024/1e6)
}
