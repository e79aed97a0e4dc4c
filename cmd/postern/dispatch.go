package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/records"
)

// exitCancelled is the exit status of a dispatch that was cancelled.
const exitCancelled = 130

func init() {
	buildCommands = append(buildCommands, func() {
		var (
			fs          dispatch.FleetSpec
			asJSON      bool
			detach      bool
			child       bool
			policyPath  string
			connTimeout time.Duration
		)
		cmd := &cobra.Command{
			Use:   "dispatch [flags] TASKS.hcl",
			Short: "Run the tasks of a tasks file over the machines that can wall them",
			Long: `Run the tasks of a tasks file over the machines that can wall them.

Each task waits in file order for a free slot (per_machine) on a machine of its pool whose
measured record can wall its lane and whose labels meet its needs; the least loaded wins. Each
attempt is an ordinary run with its own record. A machine that drops turns its runs lost and
their tasks are placed again elsewhere while their retries last. Ctrl-C stops every running
task on its machine (within 5s) and starts nothing more.

On a terminal, one live line per task; otherwise one plain line per change (--json: one JSON
object per change); a summary table at the end. Exit status: 0 when every task exited 0, 1 when
any failed, was refused or was lost, 130 when cancelled. --detach prints the dispatch's id and
leaves the work to a background process of its own: see 'postern dispatches'.`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				path, err := filepath.Abs(args[0])
				if err != nil {
					return err
				}
				file, err := fleet.Load(path)
				if err != nil {
					return &exitError{2, err}
				}
				if policyPath != "" {
					if policyPath, err = filepath.Abs(policyPath); err != nil {
						return err
					}
				}
				store, err := openStore()
				if err != nil {
					return err
				}
				if detach && !child {
					id, err := detachDispatch(store, cmd, path)
					if err != nil {
						return err
					}
					fmt.Println(id)
					return nil
				}
				wd, _ := os.Getwd()
				fs.File, fs.Policy, fs.Dir, fs.Detached = file, policyPath, wd, child
				fs.Base.Env = os.Environ()
				fs.Base.Remote.SSH.ConnectTimeout = connTimeout
				fs.Base.Remote.Version = version
				fs.Base.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
				show, closeShow, live := dispatchOutput(os.Stdout, asJSON)
				// The runs' warnings for the person (an open network, an agent
				// reinstalled) go to stderr, unless the live lines hold the
				// terminal.
				fs.Base.Warn = os.Stderr
				if live {
					fs.Base.Warn = io.Discard
				}
				fs.OnChange = show
				rec, err := dispatch.Dispatch(cmd.Context(), store, fs)
				closeShow()
				if err != nil {
					return &exitError{2, err}
				}
				out := os.Stdout
				if asJSON {
					out = os.Stderr
				}
				fmt.Fprint(out, fleet.Table(rec))
				if code := fleet.ExitCode(rec); code != 0 {
					return &exitError{code, errors.New("")}
				}
				return nil
			},
		}
		f := cmd.Flags()
		f.IntVar(&fs.Max, "max", 0, "runs at once in the whole dispatch (default: the file's max, else the machines' slots)")
		f.BoolVar(&asJSON, "json", false, "one JSON object per change on stdout (the summary table goes to stderr)")
		f.BoolVar(&detach, "detach", false, "print the dispatch's id and do the work in a background process of its own")
		f.StringVar(&policyPath, "policy", "", "policy for the walled tasks that have none, neither their own nor the file's (default: they may reach nothing)")
		f.StringArrayVarP(&fs.Base.PassEnv, "env", "e", nil, "give every task's run NAME=VALUE, or NAME with its value here (repeatable; a task's own env wins); the records keep the name, never the value")
		f.StringArrayVar(&fs.Base.AddHosts, "add-host", nil, "pin a name to an address for the doors' lookups, NAME:IP (repeatable)")
		f.StringVar(&fs.Base.Resolver, "resolver", "", "DNS server (host:port) for the doors' own lookups; default each machine's resolver")
		f.DurationVar(&connTimeout, "connect-timeout", 0, "bound on each ssh connect and handshake to a remote machine (default: the ssh config's ConnectTimeout, else 15s)")
		f.StringVar(&fs.ID, "id", "", "the dispatch's id (set by --detach for its background process)")
		f.BoolVar(&child, "detached-child", false, "this process is the background process of a --detach")
		_ = f.MarkHidden("id")
		_ = f.MarkHidden("detached-child")
		rootCmd.AddCommand(cmd)

		dispatchesCmd()
	})
}

// dispatchOutput is what a person sees of a dispatch on w: live lines on a
// terminal, one plain line per change otherwise, one JSON object per change
// with asJSON.
func dispatchOutput(w *os.File, asJSON bool) (show func(fleet.Change, *fleet.Record), done func(), live bool) {
	switch {
	case asJSON:
		return func(c fleet.Change, _ *fleet.Record) { _, _ = w.Write(fleet.JSONLine(c)) }, func() {}, false
	case term.IsTerminal(int(w.Fd())):
		lv := fleet.NewLive(w, func() (int, int) {
			width, height, err := term.GetSize(int(w.Fd()))
			if err != nil {
				return 80, 24
			}
			return width, height
		}, nil)
		return lv.Changed, lv.Close, true
	default:
		return func(c fleet.Change, _ *fleet.Record) { fmt.Fprintln(w, fleet.PlainLine(c)) }, func() {}, false
	}
}

// detachStartWait bounds how long --detach waits for its background process
// to record the dispatch.
const detachStartWait = 15 * time.Second

// detachDispatch starts the dispatch in a background process of its own (a
// session of its own, so that it outlives the terminal), waits until it has
// recorded the dispatch, and returns its id. What the process prints goes to
// a log beside the records.
func detachDispatch(store *records.Store, cmd *cobra.Command, path string) (string, error) {
	id := fleet.NewID(time.Now())
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	args := []string{"dispatch", "--detached-child", "--id", id}
	var extraEnv []string
	fl := cmd.Flags()
	for _, name := range []string{"max", "policy", "resolver", "connect-timeout"} {
		if fl.Changed(name) {
			v := fl.Lookup(name).Value.String()
			if name == "policy" {
				if abs, err := filepath.Abs(v); err == nil {
					v = abs
				}
			}
			args = append(args, "--"+name+"="+v)
		}
	}
	if pins, err := fl.GetStringArray("add-host"); err == nil {
		for _, p := range pins {
			args = append(args, "--add-host="+p)
		}
	}
	// An --env NAME takes its value here and now: the background process
	// gets it in its environment, which it inherits, so the value never
	// goes on its command line.
	if vars, err := fl.GetStringArray("env"); err == nil {
		for _, v := range vars {
			name, _, _ := strings.Cut(v, "=")
			args = append(args, "--env="+name)
			if strings.Contains(v, "=") {
				extraEnv = append(extraEnv, v)
			}
		}
	}
	args = append(args, path)
	logDir := filepath.Join(filepath.Dir(store.Path()), "dispatches")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return "", fmt.Errorf("make the directory for the dispatch's log: %w", err)
	}
	logPath := filepath.Join(logDir, id+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("open the dispatch's log: %w", err)
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return "", err
	}
	defer null.Close()
	bg := exec.Command(exe, args...)
	bg.Env = append(os.Environ(), extraEnv...)
	bg.Stdin, bg.Stdout, bg.Stderr = null, logf, logf
	bg.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := bg.Start(); err != nil {
		return "", fmt.Errorf("start the dispatch's background process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- bg.Wait() }()
	deadline := time.After(detachStartWait)
	for {
		if _, err := store.Dispatch(id); err == nil {
			return id, nil
		}
		select {
		case err := <-exited:
			// It may have recorded the dispatch and ended already.
			if _, serr := store.Dispatch(id); serr == nil {
				return id, nil
			}
			b, _ := os.ReadFile(logPath)
			return "", fmt.Errorf("the dispatch's background process ended before it began (%v): %s", err, strings.TrimSpace(string(b)))
		case <-deadline:
			return "", fmt.Errorf("the dispatch's background process (pid %d) did not record dispatch %s within %s; its log: %s", bg.Process.Pid, id, detachStartWait, logPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func dispatchesCmd() {
	root := &cobra.Command{Use: "dispatches", Short: "List dispatches, show one, wait for one, cancel one"}

	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List dispatches, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			ds, err := dispatch.Dispatches(store)
			if err != nil {
				return err
			}
			if listJSON {
				return writeJSON(os.Stdout, ds)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTASKS\tEXITED\tFAILED\tLOST\tCANCELLED\tSTARTED\tFILE")
			for _, d := range ds {
				c := counts(d.Rec)
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", d.ID, d.State, c.Tasks, c.Exited, c.Failed+c.Refused, c.Lost, c.Cancelled,
					d.StartedAt.Local().Format(time.DateTime), d.File)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dispatch: its tasks and their attempts (a unique prefix of its id is enough)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			v, err := dispatch.ShowDispatch(store, args[0])
			if err != nil {
				return err
			}
			if showJSON {
				return writeJSON(os.Stdout, v)
			}
			printDispatch(os.Stdout, v)
			return nil
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	wait := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a dispatch to end; exit as the dispatch does (0, 1, 130)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			v, err := dispatch.WaitDispatch(cmd.Context(), store, args[0])
			if err != nil {
				return err
			}
			printDispatch(os.Stdout, v)
			return dispatchExit(v)
		},
	}

	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a dispatch: stop its running tasks on their machines, start nothing more",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			v, err := dispatch.CancelDispatch(store, args[0])
			if err != nil {
				return err
			}
			ctx, stop := context.WithTimeout(cmd.Context(), 3*fleet.DefaultStopGrace)
			defer stop()
			v, err = dispatch.WaitDispatch(ctx, store, v.ID)
			if err != nil {
				return fmt.Errorf("dispatch %s was told to cancel, and has not ended yet: %w; follow it with 'postern dispatches wait %s'", args[0], err, args[0])
			}
			printDispatch(os.Stdout, v)
			return nil
		},
	}

	root.AddCommand(list, show, wait, cancel)
	rootCmd.AddCommand(root)
}

func counts(r *fleet.Record) fleet.Summary {
	var s fleet.Summary
	if r == nil {
		return s
	}
	s.Tasks = len(r.Tasks)
	for _, t := range r.Tasks {
		switch t.State {
		case fleet.Exited:
			s.Exited++
		case fleet.Failed:
			s.Failed++
		case fleet.Refused:
			s.Refused++
		case fleet.Lost:
			s.Lost++
		case fleet.Cancelled:
			s.Cancelled++
		}
	}
	return s
}

func printDispatch(w io.Writer, v *dispatch.DispatchView) {
	fmt.Fprintf(w, "dispatch %s: %s (%s), started %s\n", v.ID, v.State, v.File, v.StartedAt.Local().Format(time.DateTime))
	if v.Why != "" {
		fmt.Fprintf(w, "why: %s\n", v.Why)
	}
	if v.Rec != nil {
		fmt.Fprint(w, fleet.Table(v.Rec))
	}
}

func dispatchExit(v *dispatch.DispatchView) error {
	code := 1
	if v.Rec != nil && v.State != records.DispatchLost && !v.Rec.EndedAt.IsZero() {
		code = fleet.ExitCode(v.Rec)
	}
	if code == 0 {
		return nil
	}
	return &exitError{code, errors.New("")}
}
