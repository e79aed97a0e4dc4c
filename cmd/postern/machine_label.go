package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/dispatch"
)

func init() {
	buildCommands = append(buildCommands, func() {
		var perMachine int
		label := &cobra.Command{
			Use:   "label NAME [KEY=VALUE | KEY | KEY-]...",
			Short: "Set a machine's labels (a task's needs) and its own per_machine",
			Long: `Set a machine's labels, which a task's needs must meet: KEY=VALUE sets one, a bare KEY sets
KEY=yes, KEY- removes one. --per-machine sets how many runs of a dispatch the machine takes at
once (0: the tasks file's). A GPU can also be measured: 'postern machine probe-confinement NAME'
records the GPUs the machine's driver lists.`,
			Args: cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				store, err := openStore()
				if err != nil {
					return err
				}
				var pm *int
				if cmd.Flags().Changed("per-machine") {
					pm = &perMachine
				}
				m, err := dispatch.LabelMachine(store, args[0], args[1:], pm)
				if err != nil {
					return &exitError{2, err}
				}
				var kv []string
				for k, v := range m.Labels {
					kv = append(kv, k+"="+v)
				}
				slices.Sort(kv)
				slots := "the tasks file's"
				if m.PerMachine > 0 {
					slots = fmt.Sprint(m.PerMachine)
				}
				fmt.Fprintf(os.Stdout, "machine %s: labels %s; per_machine %s\n", m.Name, strings.Join(kv, " "), slots)
				return nil
			},
		}
		label.Flags().IntVar(&perMachine, "per-machine", 0, "runs of a dispatch the machine takes at once (0: the tasks file's)")
		for _, c := range rootCmd.Commands() {
			if c.Name() == "machine" {
				c.AddCommand(label)
				return
			}
		}
		panic("no machine command to add label to")
	})
}
