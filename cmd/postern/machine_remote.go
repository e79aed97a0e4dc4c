package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
)

// probeMachines measures the named machines (local by default, every machine with
// all), each where it is: local in process, remote through its agent. Several are
// measured at once, with a line on stderr as each starts and ends.
func probeMachines(ctx context.Context, store *records.Store, names []string, all bool, sshOpts sshclient.Options, logger *slog.Logger) ([]machineView, error) {
	var ms []machine.Machine
	switch {
	case all:
		if len(names) > 0 {
			return nil, &exitError{2, errors.New("give machine names or --all, not both")}
		}
		var err error
		if ms, err = store.Machines(); err != nil {
			return nil, err
		}
	case len(names) == 0:
		names = []string{machine.Local}
		fallthrough
	default:
		for _, n := range names {
			m, err := store.Machine(n)
			if err != nil {
				if errors.Is(err, records.ErrNotFound) {
					return nil, fmt.Errorf("machine %q is not known: add it with 'postern machine add %s --ssh DEST'", n, n)
				}
				return nil, err
			}
			ms = append(ms, m)
		}
	}
	several := len(ms) > 1
	progress := (*os.File)(nil)
	if !several && term.IsTerminal(int(os.Stderr.Fd())) {
		progress = os.Stderr
	}
	type result struct {
		rec *probe.Record
		err error
	}
	results := make([]result, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if several {
				fmt.Fprintf(os.Stderr, "postern: measuring %s …\n", m.Name)
			}
			var rec *probe.Record
			var err error
			if m.IsLocal() {
				rec, err = probe.Run(ctx, probe.Options{Name: m.Name, Version: version, Logger: logger})
			} else {
				ssh := sshOpts
				ssh.Logger = logger
				r := dispatch.Remote{SSH: ssh, Agents: store, Warn: os.Stderr}
				if progress != nil {
					r.Progress = progress
				}
				rec, err = dispatch.ProbeRemote(ctx, m, r)
			}
			if err == nil {
				err = store.PutRecord(rec)
			}
			results[i] = result{rec, err}
			if several {
				if err != nil {
					fmt.Fprintf(os.Stderr, "postern: %s: failed after %s: %v\n", m.Name, time.Since(start).Round(time.Millisecond), err)
				} else {
					fmt.Fprintf(os.Stderr, "postern: %s: measured in %s\n", m.Name, time.Since(start).Round(time.Millisecond))
				}
			}
		}()
	}
	wg.Wait()
	var views []machineView
	var errs []error
	var failed []string
	for i, m := range ms {
		if results[i].err != nil {
			failed = append(failed, m.Name)
			if !several {
				errs = append(errs, fmt.Errorf("measure %s: %w", m.Name, results[i].err))
			}
			continue
		}
		v, err := viewMachine(store, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		views = append(views, v)
	}
	if several && len(failed) > 0 {
		// Each failure was told on its own line above.
		errs = append(errs, fmt.Errorf("%d of %d machines could not be measured: %s; their records, if any, are unchanged", len(failed), len(ms), strings.Join(failed, ", ")))
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
