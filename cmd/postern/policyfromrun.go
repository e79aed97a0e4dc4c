package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/dispatch"
)

var policyFromRunCmd = &cobra.Command{
	Use:   "from-run ID",
	Short: "Write an enforce policy that allows what a run reached (run it under observe first)",
	Long: `Write, on stdout, an enforce policy that allows exactly the destinations the
run reached: its names, the addresses it reached by number (as allow_cidrs), and
the ports it used. Run an agent once under an observe policy, which lets through
everything the hard floor allows and records it, then review what this prints
and use it for the enforce runs.

What the run was refused is listed in comments, not allowed: under observe that
is only the hard floor, which no policy opens; under enforce it is what the
policy denied, for a person to decide on.`,
	Args: cobra.ExactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		store, err := openStore()
		if err != nil {
			return err
		}
		src, err := dispatch.PolicyFromRun(store, args[0])
		if err != nil {
			return err
		}
		_, err = os.Stdout.WriteString(src)
		return err
	},
}

func init() {
	buildCommands = append(buildCommands, func() {
		policyCmd.AddCommand(policyFromRunCmd)
	})
}
