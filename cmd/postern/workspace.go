package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/dispatch/workspace"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/records"
)

// wsFlagValues are postern run's workspace flags.
type wsFlagValues struct {
	mode      string
	keep      bool
	maxResult int64
}

// runWorkspace holds postern run's workspace flags.
var runWorkspace wsFlagValues

func addWorkspaceFlags(f *pflag.FlagSet, v *wsFlagValues) {
	f.StringVar(&v.mode, "workspace", dispatch.WorkspaceAuto, "the work the run takes along: auto (a remote run started in a git work tree gets a copy of it; its result comes home as branch postern/RUN), copy (a fresh copy, local runs too), none, or a directory to ship")
	f.BoolVar(&v.keep, "keep-workspace", false, "keep the run's copy on its machine once its result is home")
	f.Int64Var(&v.maxResult, "max-result", workspace.DefaultMaxResult, "largest result, in bytes, a run may bring home")
}

func workspaceFlags(ws *dispatch.Workspace, v *wsFlagValues, container bool) error {
	switch v.mode {
	case "", dispatch.WorkspaceAuto, dispatch.WorkspaceNone, dispatch.WorkspaceCopy:
		ws.Mode = v.mode
	default:
		if st, err := os.Stat(v.mode); err != nil || !st.IsDir() {
			return fmt.Errorf("--workspace %q: give auto, none, copy, or a directory to ship", v.mode)
		}
		ws.Mode, ws.Dir = dispatch.WorkspaceDir, v.mode
	}
	if container && ws.Mode != "" && ws.Mode != dispatch.WorkspaceAuto && ws.Mode != dispatch.WorkspaceNone {
		return fmt.Errorf("--workspace %s: a run in a container works where it is; workspaces are for runs on machines (give --workspace none, or leave out --container)", v.mode)
	}
	if v.maxResult <= 0 {
		return fmt.Errorf("--max-result %d: give a number of bytes", v.maxResult)
	}
	ws.Keep, ws.MaxResult = v.keep, v.maxResult
	return nil
}

// printWorkspace tells the person where the run's result is.
func printWorkspace(w io.Writer, r *records.Run) {
	ws := r.Workspace
	if ws == nil {
		return
	}
	switch ws.State {
	case records.WorkspaceUnchanged:
		fmt.Fprintf(w, "postern: run %s changed nothing: no branch made\n", r.ID)
	case records.WorkspaceFetched:
		how := fmt.Sprintf("%d commit(s) on top of %.12s", ws.Commits, ws.Base)
		if ws.Base == "" {
			how = fmt.Sprintf("%d commit(s)", ws.Commits)
		}
		if !ws.Descends {
			how = "REWRITTEN HISTORY: it does not descend from the base " + ws.Base
		}
		fmt.Fprintf(w, "postern: run %s: result on branch %s (%s); 'postern runs diff %s'\n%s", r.ID, ws.ResultBranch, how, r.ID, ws.Stat)
	case records.WorkspaceKept, records.WorkspaceShipped:
		fmt.Fprintf(w, "postern: run %s: its copy is kept on %s at %s", r.ID, r.Machine, ws.Dir)
		if ws.Error != "" {
			fmt.Fprintf(w, " (%s)", ws.Error)
		}
		fmt.Fprintf(w, "; fetch its result with 'postern runs fetch %s'\n", r.ID)
	}
	if ws.Keep && ws.State == records.WorkspaceFetched {
		fmt.Fprintf(w, "postern: run %s: its copy is kept on %s at %s (--keep-workspace)\n", r.ID, r.Machine, ws.Dir)
	}
}

func workspaceRows(row func(k, v string), r *records.Run) {
	ws := r.Workspace
	if ws == nil {
		return
	}
	row("workspace", fmt.Sprintf("%s from %s (%s)", ws.Mode, ws.Repo, ws.State))
	row("workspace base", ws.Base)
	row("workspace dir", ws.Dir)
	if ws.ResultBranch != "" {
		b := ws.ResultBranch + " at " + ws.Result
		if !ws.Descends {
			b += " (does not descend from the base: history rewritten)"
		}
		row("branch", b)
	}
	row("workspace error", ws.Error)
}

func printKeptWorkspaces(w io.Writer, store *records.Store, machine string) error {
	runs, err := dispatch.KeptWorkspaces(store, machine)
	if err != nil || len(runs) == 0 {
		return err
	}
	fmt.Fprintln(w, "\nworkspaces kept on the machine:")
	for _, r := range runs {
		fmt.Fprintf(w, "  %s  %s  %s  %s\n", r.ID, r.Workspace.State, r.Workspace.Dir, termtext.Printable(strings.Join(r.Command, " ")))
	}
	return nil
}

func init() {
	buildCommands = append(buildCommands, func() {
		var stat bool
		diff := &cobra.Command{
			Use:   "diff ID",
			Short: "Print the patch from a run's base to its result (--stat: the diffstat)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				store, err := openStore()
				if err != nil {
					return err
				}
				out, err := dispatch.WorkspaceDiff(cmd.Context(), store, args[0], stat)
				if err != nil {
					return err
				}
				_, err = os.Stdout.Write(out)
				return err
			},
		}
		diff.Flags().BoolVar(&stat, "stat", false, "print the diffstat only")

		var maxResult int64
		fetch := &cobra.Command{
			Use:   "fetch ID",
			Short: "Bring home the result of a run whose copy is still on its machine (a lost run)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				store, err := openStore()
				if err != nil {
					return err
				}
				r, err := dispatch.FetchResult(cmd.Context(), store, args[0], dispatch.Remote{Warn: os.Stderr}, maxResult)
				if err != nil {
					return err
				}
				printWorkspace(os.Stdout, r)
				return nil
			},
		}
		fetch.Flags().Int64Var(&maxResult, "max-result", 0, "largest result, in bytes, to bring home (default: the run's, 1 GiB)")
		for _, c := range rootCmd.Commands() {
			if c.Name() == "runs" {
				c.AddCommand(diff, fetch)
			}
		}
	})
}
