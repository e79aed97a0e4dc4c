package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/probe"
)

// Hidden entry points: postern re-executes itself under these first arguments
// to become the wall's init, the wall's last stage before the command, or a
// probe child. People never type them. main looks them up before it builds or
// runs any command line: each wall start pays for its init and its last stage,
// and neither needs cobra.

// reexecs are the hidden entry points by first argument. Each gets the
// arguments after it and returns the process's exit status.
var reexecs = map[string]func(args []string) int{
	netwall.InitArg: netwall.InitMain,
	netwall.ExecArg: netwall.ExecMain,
	seatbelt.ExecArg: func(args []string) int {
		err := seatbelt.ExecMain(args)
		return failed(err, errors.Is(err, seatbelt.ErrCommandNotFound))
	},
	probe.SeatbeltArg: probeChild(probe.SeatbeltArg),
	probe.ConnectArg:  probeChild(probe.ConnectArg),
	probe.UsernsArg:   probeChild(probe.UsernsArg),
	probe.NetnsArg:    probeChild(probe.NetnsArg),
	probe.OverlayArg:  probeChild(probe.OverlayArg),
}

// reexecEntry is the hidden entry point argv asks for, if any.
func reexecEntry(argv []string) (func() int, bool) {
	if len(argv) < 2 {
		return nil, false
	}
	run, ok := reexecs[argv[1]]
	if !ok {
		return nil, false
	}
	return func() int { return run(argv[2:]) }, true
}

// failed prints why an exec stage could not exec its command and returns the
// status shells use: 127 for a command not found, else 126.
func failed(err error, notFound bool) int {
	fmt.Fprintln(os.Stderr, "postern:", err)
	if notFound {
		return 127
	}
	return 126
}

func probeChild(name string) func(args []string) int {
	return func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return probe.ChildMain(ctx, name, args, os.Stdout)
	}
}

// exitCode makes the process exit with code and print nothing.
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code, err: errors.New("")}
}
