package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/signals"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/records"
)

func init() {
	buildCommands = append(buildCommands, func() {
		var (
			spec    dispatch.Spec
			quiet   bool
			jsonOut bool
			gateway string
		)
		cmd := &cobra.Command{
			Use:   "run [flags] -- CMD [ARGS...]",
			Short: "Run a command on a machine behind the wall, with the door judging every connection",
			Long: `Run a command on a machine behind the wall, with the door judging every connection.

The machine must have been measured with 'postern machine probe-confinement'; a machine never
measured, or measured unable, is refused before anything is spawned (exit 77, marker
EGRESS-CLOSED-DEFAULT-REFUSED). Without --policy the run may reach nothing.

postern says 'postern: run ID on MACHINE (CARRY)' on stderr as the run starts (-q: not).
With --json, everything postern itself says is JSON lines on stderr (one object as the run
starts, one per denial and warning, one at its end); the run's stdout and stderr are its own.

Exit status: the run's own; 2 bad usage (flags, policy, --env); 77 refused; 125 postern
could not start the run or record its end; 126 the command cannot be executed; 127 it was
not found; 255 the connection to the run's machine was lost.`,
			Args: cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if cmd.Flags().Changed("egress-open") {
					// A blank reason, or the next flag or "--" taken as the value
					// ("--egress-open -- cmd"), is no reason: refuse rather than open.
					reason := strings.TrimSpace(spec.EgressOpen)
					if reason == "" || strings.HasPrefix(reason, "-") {
						return &exitError{2, fmt.Errorf("--egress-open needs a reason, e.g. --egress-open \"installing the toolchain from the vendor's site\" (got %q)", spec.EgressOpen)}
					}
				}
				if err := checkContainerFlags(cmd, spec.Container); err != nil {
					return &exitError{2, err}
				}
				if cmd.Flags().Changed("pids-limit") && spec.PidsLimit < 16 {
					return &exitError{2, fmt.Errorf("--pids-limit %d: give at least 16, the processes and threads the run may have at once", spec.PidsLimit)}
				}
				if gateway != "" {
					// The token stays in memory: the record names the gateway
					// by its URL without credentials.
					up, err := door.ParseUpstream(gateway)
					if err != nil {
						return &exitError{2, err}
					}
					spec.Upstream = up
				}
				rep := newRunReport(stderr, jsonOut, quiet)
				store, err := openStore()
				if err != nil {
					rep.end(nil, err, exitPostern, records.EndStartFailed, 0)
					if jsonOut {
						return &exitError{exitPostern, errors.New("")}
					}
					return &exitError{exitPostern, err}
				}
				if spec.Machine == "local" {
					// The door serves from this process.
					if !netwall.SetsUpItself() {
						leaveCoresToTheRun()
					}
				} else {
					takeCoresBack()
				}
				// The run's signals: held before its command starts, asked for
				// while the wall goes up (see dispatch.Spec), and never given
				// back, the process ending with the run (giving each back
				// costs as much as asking for it). SIGINT and SIGTERM, held
				// from the process's start, are taken over from main.
				sigs := make(chan os.Signal, 8)
				interrupts := caught.take(sigs)
				others := signals.Hold(sigs, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
				held := make(chan struct{})
				go func() {
					<-interrupts
					<-others
					close(held)
				}()
				spec.SignalsHeld = held
				wd, _ := os.Getwd()
				spec.Command = args
				spec.Dir = wd
				spec.Env = os.Environ()
				spec.Stdin, spec.Stdout, spec.Stderr = os.Stdin, os.Stdout, os.Stderr
				spec.Signals = sigs
				spec.Remote.SSH = withSSHConfig(spec.Remote.SSH)
				spec.Warn = rep.warnings()
				spec.Logger = rep.logger()
				spec.Remote.Version = version
				spec.OnStart = rep.start
				if spec.Machine == "local" && netwall.SetsUpItself() {
					spec.OnStart = func(run *records.Run) {
						rep.start(run)
						leaveCoresLater()
					}
				}
				spec.OnEvent = rep.event
				if jsonOut {
					// A terminal's progress line is no JSON line.
					spec.Remote.Progress = io.Discard
				}
				if err := workspaceFlags(&spec.Workspace, &runWorkspace, spec.Container.Image != ""); err != nil {
					return &exitError{2, err}
				}
				// Signals reach the run through spec.Signals; they must not also cancel it.
				begun := time.Now()
				run, err := dispatch.Run(context.WithoutCancel(cmd.Context()), store, spec)
				code, why := runOutcome(run, err)
				rep.end(run, err, code, why, time.Since(begun))
				if run != nil && !jsonOut {
					printWorkspace(stderr, run)
				}
				if code == 0 {
					return nil
				}
				var ref *carry.Refusal
				switch {
				case jsonOut || err == nil:
					// Said in the end object, or the run's own status.
					return &exitError{code, errors.New("")}
				case errors.As(err, &ref):
					fmt.Fprintln(stderr, ref.Error())
					return &exitError{code, errors.New("")}
				}
				return &exitError{code, err}
			},
		}
		f := cmd.Flags()
		f.SetInterspersed(false)
		f.StringVar(&spec.Machine, "machine", "local", "machine to run on")
		f.StringVar(&spec.PolicyPath, "policy", "", "egress policy file (HCL); without it the run may reach nothing")
		f.StringArrayVar(&spec.AddHosts, "add-host", nil, "pin a name to an address for the door's lookups, NAME:IP (repeatable)")
		f.StringVar(&gateway, "gateway", "", "join a gateway, http://NAME:TOKEN@HOST:PORT: the wall as usual, and every connection sent on to the gateway, which judges it by NAME's policy")
		f.StringVar(&spec.Resolver, "resolver", "", "DNS server (host:port) for the door's own lookups; default the system resolver")
		f.StringVar(&spec.UpstreamRoots, "upstream-ca", "", "PEM file of certificate authorities trusted, besides this machine's, when the door verifies a host the policy inspects")
		f.StringVar(&spec.EgressOpen, "egress-open", "", "run WITHOUT a wall; the reason is required and recorded")
		f.BoolVar(&spec.KeepHome, "keep-home", false, "keep what the run writes in its home outside its writable places, rather than discarding it; the end of the run says where")
		f.DurationVar(&spec.Remote.SSH.ConnectTimeout, "connect-timeout", 0, "bound on each ssh connect and handshake to a remote machine (default: the ssh config's ConnectTimeout, else 15s)")
		f.StringVar(&spec.Network, "network", "", "\"none\": run with no network at all, only lo: no door, no DNS, nothing to judge")
		f.IntVar(&spec.PidsLimit, "pids-limit", 0, "processes and threads the run may have at once (default: the policy's pids_limit, else 4096)")
		f.BoolVarP(&quiet, "quiet", "q", false, "do not print the start line, nor denials as they happen")
		f.BoolVar(&jsonOut, "json", false, "say everything postern itself says as JSON lines on stderr: start, denials, warnings, end (the run's own output untouched)")
		f.StringArrayVarP(&spec.PassEnv, "env", "e", nil, "give the run NAME=VALUE, or NAME with its value here (repeatable); the record keeps the name, never the value")
		f.StringVar(&spec.Container.Image, "container", "", "run in a local container from IMAGE, with the wall inside the container's own network namespace")
		f.StringVar(&spec.Container.Engine, "engine", "", "container engine for --container: podman or docker (default: the first that answers)")
		f.StringVar(&spec.Container.Network, "container-network", "", "with --container: \"none\" runs it with no network at all (no wall, no door)")
		// Workspaces: what work the run takes along (workspace.go).
		addWorkspaceFlags(f, &runWorkspace)
		rootCmd.AddCommand(cmd)
	})
}

// printDenial tells the person (or the agent reading stderr) in one line what the
// door refused and why, as it happens.
func printDenial(w io.Writer, ev door.Event) {
	if ev.Event != "decision" || (ev.Decision != "deny" && !ev.WouldDeny) {
		return
	}
	target := ev.Host
	if ev.Port != 0 {
		target = fmt.Sprintf("%s:%d", ev.Host, ev.Port)
	}
	if ev.Method != "" {
		target = ev.Method + " " + ev.Path + " on " + target
	}
	// The run chose the target (a malformed one is recorded as sent): it
	// must not act on the person's terminal.
	target, reason := termtext.Printable(target), termtext.Printable(ev.Reason)
	more := ""
	if ev.Repeats > 0 {
		more = fmt.Sprintf(" (and %d more like it in the second before)", ev.Repeats)
	}
	if ev.Kind == "wall" {
		fmt.Fprintf(w, "postern: the wall refused %s%s: %s\n", target, more, reason)
		return
	}
	verb := "denied"
	if ev.WouldDeny {
		verb = "observed (enforce would deny)"
	}
	fmt.Fprintf(w, "postern: %s %s %s%s: %s\n", verb, ev.Kind, target, more, reason)
}
