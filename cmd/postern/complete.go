package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/internal/termtext"
)

// completeMachines completes the first argument with the names of the
// machines postern knows.
func completeMachines(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return machineNamesLike(toComplete, nil)
}

// completeMoreMachines completes any argument with the names of machines
// not given yet.
func completeMoreMachines(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return machineNamesLike(toComplete, args)
}

// completeMachineFlag completes a --machine flag.
func completeMachineFlag(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return machineNamesLike(toComplete, nil)
}

func init() {
	buildCommands = append(buildCommands, func() {
		// run is defined in a file after this one: its --machine completes once
		// every command exists (and before __complete looks).
		cobra.OnInitialize(func() {
			if run, _, err := rootCmd.Find([]string{"run"}); err == nil && run != nil && run.Flags().Lookup("machine") != nil {
				if _, ok := run.GetFlagCompletionFunc("machine"); !ok {
					_ = run.RegisterFlagCompletionFunc("machine", completeMachineFlag)
				}
			}
		})
	})
}

func machineNamesLike(toComplete string, given []string) ([]string, cobra.ShellCompDirective) {
	store, err := openStore()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ms, err := store.Machines()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, m := range ms {
		if strings.HasPrefix(m.Name, toComplete) && !slices.Contains(given, m.Name) {
			desc := "local"
			if m.SSH != "" {
				desc = m.SSH
			}
			out = append(out, m.Name+"\t"+desc)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeRuns completes the first argument with run ids, newest first.
func completeRuns(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	store, err := openStore()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	rs, err := store.Runs()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		if strings.HasPrefix(r.ID, toComplete) {
			out = append(out, r.ID+"\t"+r.Machine+" "+string(r.State)+" "+termtext.Printable(strings.Join(r.Command, " ")))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
