package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/records"
)

func init() {
	buildCommands = append(buildCommands, func() {
		runs := &cobra.Command{Use: "runs", Short: "List runs, show one, read its events"}

		var (
			listJSON     bool
			filter       runFilter
			listDispatch string
		)
		list := &cobra.Command{
			Use:   "list",
			Short: "List runs, oldest first",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				store, err := openStore()
				if err != nil {
					return err
				}
				rs, err := dispatch.Runs(store)
				if err != nil {
					return err
				}
				if listDispatch != "" {
					if rs, err = dispatch.RunsOf(store, rs, listDispatch); err != nil {
						return err
					}
				}
				now := time.Now()
				if rs, err = filter.apply(rs, now); err != nil {
					return &exitError{2, err}
				}
				if listJSON {
					return writeJSON(os.Stdout, rs)
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tMACHINE\tCARRY\tSTATE\tEXIT\tALLOWED\tDENIED\tSTARTED\tDURATION\tCOMMAND")
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.Machine, r.Carry, r.State, exitText(r),
						r.Allowed, r.Denied, r.StartedAt.Local().Format(time.DateTime), durationText(r, now), termtext.Printable(strings.Join(r.Command, " ")))
				}
				return tw.Flush()
			},
		}
		list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array")
		list.Flags().StringVar(&filter.machine, "machine", "", "only runs on this machine")
		list.Flags().StringVar(&filter.state, "state", "", "only runs in this state: "+strings.Join(runStates, ", "))
		list.Flags().StringVar(&filter.since, "since", "", "only runs started since: a duration back from now (2h, 30m) or a time (2026-12-01 15:04)")
		list.Flags().IntVar(&filter.limit, "limit", 0, "only the newest N runs (still listed oldest first)")
		_ = list.RegisterFlagCompletionFunc("machine", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return completeMachines(cmd, nil, toComplete)
		})
		_ = list.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(runStates, cobra.ShellCompDirectiveNoFileComp))
		list.Flags().StringVar(&listDispatch, "dispatch", "", "only the runs of this dispatch (a unique prefix of its id is enough)")

		var showJSON bool
		show := &cobra.Command{
			Use:               "show ID",
			Short:             "Show one run (a unique prefix of its id is enough)",
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: completeRuns,
			RunE: func(cmd *cobra.Command, args []string) error {
				_, r, err := openRun(args[0])
				if err != nil {
					return err
				}
				if showJSON {
					return writeJSON(os.Stdout, r)
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				row := func(k, v string) {
					if v != "" {
						fmt.Fprintf(tw, "%s\t%s\n", k, v)
					}
				}
				row("id", r.ID)
				row("machine", r.Machine)
				row("lane", string(r.Lane))
				row("carry", string(r.Carry))
				row("state", string(r.State))
				row("exit", exitText(r))
				row("command", strings.Join(r.Command, " "))
				row("dispatch", r.Dispatch)
				row("task", r.Task)
				row("dir", r.Dir)
				row("policy", r.Policy)
				if r.PolicySHA256 != "" {
					cut := ""
					if r.PolicyTextCut {
						cut = fmt.Sprintf(" (its text kept up to %d KiB)", records.MaxPolicyText>>10)
					}
					row("policy sha256", r.PolicySHA256+cut)
				}
				row("mode", r.Mode)
				row("egress open", r.EgressOpenReason)
				row("network", r.Network)
				if r.Seal != nil {
					held := "held"
					if !r.Seal.Held {
						held = "not held: " + r.Seal.Why
					}
					row("seal", fmt.Sprintf("guardrail %s, %s", r.Seal.Guardrail, held))
				}
				if r.RunPid > 0 {
					row("pid", fmt.Sprintf("%d on %s", r.RunPid, r.Machine))
				}
				row("started", r.StartedAt.Local().Format(time.RFC3339))
				if !r.EndedAt.IsZero() {
					row("ended", r.EndedAt.Local().Format(time.RFC3339))
				}
				row("decisions", fmt.Sprintf("%d allowed, %d denied, %d would be denied", r.Allowed, r.Denied, r.WouldDeny))
				if r.EventsDropped > 0 || r.EventsLost > 0 {
					row("events not stored", fmt.Sprintf("%d over the rate bound, %d lost", r.EventsDropped, r.EventsLost))
				}
				row("events error", r.EventsError)
				row("landlock", r.Landlock)
				for _, g := range r.Guarded {
					row("made or changed", g)
				}
				for _, w := range r.Writes {
					row("writes", w)
				}
				row("env", strings.Join(r.EnvNames, ", ")) // names only: values are never recorded
				row("end", r.End)
				row("why", r.Why)
				workspaceRows(row, r)
				return tw.Flush()
			},
		}
		show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

		var (
			evJSON bool
			follow bool
		)
		events := &cobra.Command{
			Use:               "events ID",
			Short:             "Print a run's events (--follow to keep printing while it runs)",
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: completeRuns,
			RunE: func(cmd *cobra.Command, args []string) error {
				store, r, err := openRun(args[0])
				if err != nil {
					return err
				}
				return printEvents(cmd.Context(), store, r.ID, os.Stdout, evJSON, follow)
			},
		}
		events.Flags().BoolVar(&evJSON, "json", false, "print JSON lines, as the door does, each with every key")
		events.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until the run ends")

		runs.AddCommand(list, show, events, runsLogsCmd())
		rootCmd.AddCommand(runs)
	})
}

func exitText(r *records.Run) string {
	if r.ExitCode == nil {
		return "-"
	}
	return fmt.Sprint(*r.ExitCode)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// followPoll is how often --follow looks for new events.
const followPoll = 200 * time.Millisecond

func printEvents(ctx context.Context, store *records.Store, id string, w io.Writer, asJSON, follow bool) error {
	var (
		seq    uint64
		header bool
	)
	// Following, rows come a few at a time: columns of fixed widths (that
	// only grow) keep them under the header; otherwise all rows are aligned
	// at once.
	var tw interface {
		io.Writer
		Flush() error
	} = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if follow {
		tw = newColumns(w, eventWidths)
	}
	for {
		evs, next, err := store.Events(id, seq)
		if err != nil {
			return err
		}
		seq = next
		for _, ev := range evs {
			if asJSON {
				b, err := fullJSON(ev)
				if err != nil {
					return err
				}
				if _, err := w.Write(append(b, '\n')); err != nil {
					return err
				}
				continue
			}
			if !header {
				fmt.Fprintln(tw, "TIME\tEVENT\tKIND\tDECISION\tHOST\tPORT\tADDR\tBYTES UP/DOWN\tREASON")
				header = true
			}
			fmt.Fprintln(tw, eventRow(ev))
		}
		if !asJSON {
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if !follow {
			return nil
		}
		r, err := dispatch.Show(store, id)
		if err != nil {
			return err
		}
		if r.Ended() && len(evs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}

func eventRow(ev door.Event) string {
	decision := string(ev.Decision)
	if ev.WouldDeny {
		decision += " (would deny)"
	}
	bytes := ""
	if ev.Event == "end" {
		bytes = fmt.Sprintf("%d/%d", ev.BytesUp, ev.BytesDown)
		decision = "-"
	}
	if ev.Repeats > 0 {
		decision += fmt.Sprintf(" (x%d)", ev.Repeats+1)
	}
	port := ""
	if ev.Port != 0 {
		port = fmt.Sprint(ev.Port)
	}
	reason := ev.Reason
	if ev.Method != "" {
		reason = ev.Method + " " + ev.Path + ": " + reason
	}
	// Host and reason can carry what the run sent: shown printable only.
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", ev.Time.Local().Format("15:04:05.000"), ev.Event, ev.Kind, decision,
		termtext.Printable(ev.Host), port, ev.Addr, bytes, termtext.Printable(reason))
}
