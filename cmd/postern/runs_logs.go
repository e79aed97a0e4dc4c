package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/records"
)

// outputGrace bounds how long --follow waits, after a dispatched run's end,
// for its last output to be kept.
const outputGrace = 5 * time.Second

// runsLogsCmd is 'postern runs logs RUN-ID [--follow]'.
func runsLogsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print what a dispatched run wrote: its stdout on stdout, its stderr on stderr (the last 1 MiB of each)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			r, err := dispatch.Show(store, args[0])
			if err != nil {
				return err
			}
			if r.Dispatch == "" {
				fmt.Fprintf(os.Stderr, "postern: run %s was not dispatched: its output went to the terminal that ran it, and is not kept\n", r.ID)
			}
			return printOutput(cmd.Context(), store, r.ID, os.Stdout, os.Stderr, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the run writes until it ends")
	return cmd
}

// printOutput prints a run's kept output; with follow, what it adds too,
// until it has ended and everything it wrote is printed.
func printOutput(ctx context.Context, store *records.Store, id string, stdout, stderr io.Writer, follow bool) error {
	printed := map[string]uint64{}
	streams := []struct {
		name string
		w    io.Writer
	}{{records.Stdout, stdout}, {records.Stderr, stderr}}
	var endedAt time.Time
	for {
		// Whether its output is complete is read before the output: what
		// it wrote is then all there. A dispatched run's output is
		// complete shortly after its end; a run of its own keeps none.
		r, err := dispatch.Show(store, id)
		if err != nil {
			return err
		}
		done, err := store.OutputDone(id)
		if err != nil {
			return err
		}
		if r.Ended() && endedAt.IsZero() {
			endedAt = time.Now()
		}
		finished := done || (r.Ended() && (r.Dispatch == "" || time.Since(endedAt) > outputGrace))
		for _, s := range streams {
			data, offset, err := store.Output(id, s.name)
			if err != nil {
				return err
			}
			end := offset + uint64(len(data))
			from := printed[s.name]
			if from < offset {
				from = offset // cut from the front before it was printed
			}
			if from < end {
				if _, err := s.w.Write(data[from-offset:]); err != nil {
					return err
				}
			}
			printed[s.name] = end
		}
		if !follow || finished {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}
