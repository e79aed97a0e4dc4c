package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/probe"
)

// Hidden entry points: postern re-executes itself under these first arguments
// to become the wall's init, the wall's last stage before the command, or a
// probe child. People never type them.

// forwardedSignals are passed by the wall's init to the run.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func hidden(use string, run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Hidden:             true,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE:               run,
	}
}

func init() {
	rootCmd.AddCommand(
		hidden(netwall.InitArg, func(cmd *cobra.Command, args []string) error {
			sigs := make(chan os.Signal, 8)
			// SIGWINCH: the init resizes the run's terminal.
			signal.Notify(sigs, append(forwardedSignals, syscall.SIGWINCH)...)
			// SIGINT and SIGTERM are the run's to handle: the init passes
			// them on instead of stopping.
			code := netwall.Init(context.WithoutCancel(cmd.Context()), sigs)
			return exitCode(code)
		}),
		hidden(netwall.ExecArg, func(cmd *cobra.Command, args []string) error {
			err := netwall.ExecDropped(args)
			if errors.Is(err, netwall.ErrCommandNotFound) {
				return &exitError{code: 127, err: err}
			}
			return &exitError{code: 126, err: err}
		}),
		hidden(seatbelt.ExecArg, func(cmd *cobra.Command, args []string) error {
			err := seatbelt.ExecMain(args)
			if errors.Is(err, seatbelt.ErrCommandNotFound) {
				return &exitError{code: 127, err: err}
			}
			return &exitError{code: 126, err: err}
		}),
		hidden(probe.SeatbeltArg, probeChild(probe.SeatbeltArg)),
		hidden(probe.ConnectArg, probeChild(probe.ConnectArg)),
		hidden(probe.UsernsArg, probeChild(probe.UsernsArg)),
		hidden(probe.NetnsArg, probeChild(probe.NetnsArg)),
		hidden(probe.OverlayArg, probeChild(probe.OverlayArg)),
	)
}

func probeChild(name string) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return exitCode(probe.ChildMain(cmd.Context(), name, args, os.Stdout))
	}
}

// exitCode makes the process exit with code and print nothing.
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code, err: errors.New("")}
}
