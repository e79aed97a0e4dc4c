package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// The agent's entry points: the controller starts 'postern __agent serve' on a
// remote machine over ssh. People never type them.
func init() {
	buildCommands = append(buildCommands, func() {
		cmd := &cobra.Command{Use: "__agent", Hidden: true, SilenceUsage: true}
		cmd.AddCommand(&cobra.Command{
			Use:  "serve",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				// SIGINT and SIGTERM are ignored until main's relay has them
				// (signals.Hold), and a command started meanwhile would
				// inherit them ignored: an open run's command, which no
				// wall's init resets, would never end on a Ctrl-C typed at
				// home. Nothing is started before they are held.
				<-caught.registered()
				leaveCoresToTheRun() // a run's door serves from this process
				out, logw, err := protocolStreams()
				if err != nil {
					return err
				}
				defer out.Close()
				logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
				err = agent.Serve(cmd.Context(), os.Stdin, out, agent.Handlers{
					Version: version,
					Run: func(ctx context.Context, req agent.RunRequest, rio agent.RunIO) (int, error) {
						return dispatch.ServeAgentRun(ctx, req, rio, logger)
					},
					Probe: func(ctx context.Context, name string) (*probe.Record, error) {
						return dispatch.ProbeHere(ctx, name, version, logger)
					},
					Workspace: dispatch.ServeAgentWorkspace,
				})
				if err != nil {
					fmt.Fprintln(logw, "postern agent:", err)
					return exitCode(1)
				}
				return nil
			},
		})
		cmd.AddCommand(&cobra.Command{
			Use:  "version",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				h, err := agent.SelfHash()
				if err != nil {
					return err
				}
				fmt.Printf("postern-agent %s protocol %d sha256 %s\n", version, agent.Protocol, h)
				return nil
			},
		})
		rootCmd.AddCommand(cmd)
	})
}

// protocolStreams takes stdout for the protocol and stderr for logs on
// descriptors of their own, and points 1 and 2 at /dev/null: nothing else in the
// process can write into the protocol, and a write after the controller is gone
// fails with EPIPE instead of killing the agent before it has torn the run down.
func protocolStreams() (out, logw *os.File, err error) {
	o, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: take stdout: %w", err)
	}
	e, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		unix.Close(o)
		return nil, nil, fmt.Errorf("agent: take stderr: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err == nil {
		_ = unix.Dup2(int(null.Fd()), 1)
		_ = unix.Dup2(int(null.Fd()), 2)
		null.Close()
	}
	return os.NewFile(uintptr(o), "agent-protocol"), os.NewFile(uintptr(e), "agent-log"), nil
}
