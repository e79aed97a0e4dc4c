package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/records"
)

// probeMachines measures the named machines (local by default, every machine with
// all) and shows each one measured; see dispatch.ProbeMachines.
func probeMachines(ctx context.Context, store *records.Store, names []string, all bool, sshOpts sshclient.Options, logger *slog.Logger) ([]machineView, error) {
	p := dispatch.Probe{Names: names, All: all, SSH: sshOpts, Version: version, Logger: logger, Log: os.Stderr}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		p.Progress = os.Stderr
	}
	measured, err := dispatch.ProbeMachines(ctx, store, p)
	if errors.Is(err, dispatch.ErrNamesAndAll) {
		return nil, &exitError{2, err}
	}
	errs := []error{err}
	var views []machineView
	for _, r := range measured {
		if r.Err != nil {
			continue
		}
		v, err := viewMachine(store, r.Machine)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		views = append(views, v)
	}
	return views, errors.Join(errs...)
}

func importCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE",
		Short: "Add or update machines declared in an HCL inventory (they stay unmeasured until probed)",
		Long: `Add or update machines declared in an HCL inventory:

  machine "gpu1" {
    ssh       = "gpu1"                # alias from ~/.ssh/config, or [user@]host[:port]
    identity  = "~/.ssh/id_ed25519"   # optional
    agent_dir = "/opt/postern/agents" # optional: where the agent is installed
    labels    = { gpu = "a100" }      # optional
  }

A machine whose ssh destination changes loses its record: it is another host now.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, err := machine.LoadInventory(args[0])
			if err != nil {
				var ie *machine.InventoryError
				if errors.As(err, &ie) {
					return &exitError{2, err}
				}
				return err
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			for _, m := range ms {
				old, err := store.Machine(m.Name)
				state := "added"
				switch {
				case err == nil && old.SSH == m.SSH:
					m.AddedAt = old.AddedAt
					state = "updated"
				case err == nil:
					if err := store.RemoveMachine(m.Name); err != nil {
						return err
					}
					state = "replaced (now another host: unmeasured)"
				case !errors.Is(err, records.ErrNotFound):
					return err
				}
				if m.AddedAt.IsZero() {
					m.AddedAt = time.Now().UTC()
				}
				if err := store.PutMachine(m); err != nil {
					return err
				}
				fmt.Printf("%s\t%s\t%s\n", m.Name, m.SSH, state)
			}
			return nil
		},
	}
}
