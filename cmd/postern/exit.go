package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/records"
)

// postern's own exit statuses; any other is the run's. As docker run and ssh
// do: the run's status passes through, postern's failures are kept apart.
const (
	exitUsage         = 2   // bad flags, arguments, policy or --env: nothing was tried
	exitRefused       = 77  // no carry could wall the run: nothing was spawned
	exitPostern       = 125 // postern could not start the run, or record its end
	exitNotExecutable = 126 // the command was found but cannot be executed
	exitNotFound      = 127 // the command was not found
	exitLost          = 255 // the connection to the run's machine was lost mid-run
)

// exitUnrecorded is postern's own failure status after a run ended: its
// record could not be written, so the run's own status is not postern's.
const exitUnrecorded = exitPostern

// why values of 'run --json' beyond records.End*: input postern would not
// try.
const whyUsage = "usage"

// runOutcome is what 'postern run' exits with, and why, from what
// dispatch.Run returned.
func runOutcome(run *records.Run, err error) (code int, why string) {
	var (
		ref  *carry.Refusal
		perr *dispatch.PolicyError
		eerr *dispatch.EnvError
		rerr *dispatch.RecordError
		cerr *dispatch.CommandError
	)
	switch {
	case errors.As(err, &ref):
		return exitRefused, records.EndRefused
	case errors.As(err, &perr), errors.As(err, &eerr):
		return exitUsage, whyUsage
	case errors.As(err, &rerr):
		// The run ended; only its record is missing.
		return exitUnrecorded, endOf(rerr.Run, records.EndStartFailed)
	case errors.As(err, &cerr):
		return cerr.Code(), cerr.End()
	case errors.Is(err, dispatch.ErrRunLost):
		return exitLost, records.EndLost
	case err != nil:
		return exitPostern, records.EndStartFailed
	}
	if run.ExitCode == nil {
		return exitPostern, endOf(run, records.EndStartFailed)
	}
	return *run.ExitCode, endOf(run, records.EndExited)
}

func endOf(run *records.Run, otherwise string) string {
	if run != nil && run.End != "" {
		return run.End
	}
	return otherwise
}

// usageError is an exit status 2 error that points at the command's help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{exitUsage, fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
}

// strictCommands makes every usage error exit 2: flags cobra cannot parse,
// arguments a command does not take, and subcommands that do not exist,
// which get an error naming the closest ones rather than the help.
func strictCommands(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError(cmd, err) })
	// cobra adds these as it executes: added now, they are made strict too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" && c.Run != nil {
			strictHelp(c)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.DisableFlagParsing {
			return // hidden entry points: their arguments are their own
		}
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			return
		}
		if c.Args != nil {
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return usageError(cmd, err)
				}
				return nil
			}
		}
	}
	walk(root)
}

// strictHelp makes 'postern help TOPIC' a usage error when TOPIC names no
// command, instead of printing some help with status 0.
func strictHelp(help *cobra.Command) {
	run := help.Run
	help.Run = nil
	help.RunE = func(cmd *cobra.Command, args []string) error {
		found, rest, err := cmd.Root().Find(args)
		if err != nil {
			return usageError(cmd, err)
		}
		if len(rest) > 0 {
			return unknownSubcommand(found, rest)
		}
		run(cmd, args)
		return nil
	}
}

// unknownSubcommand accepts no arguments for a command that only groups
// others: one is a subcommand that does not exist.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + quotedOr(s) + "?"
	}
	return &exitError{exitUsage, fmt.Errorf("%s (see '%s --help')", msg, cmd.CommandPath())}
}

func quotedOr(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, " or ")
}
