//go:build man

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The manual pages are made from the commands themselves ('make man'), so
// they say what --help says. Only a build with the man tag has the command:
// the markdown package the generator links costs every start of the binary
// some 0.3 ms of package initialisation, the wall's init included.
func init() {
	buildCommands = append(buildCommands, func() {
		cmd := &cobra.Command{
			Use:    "__man DIR",
			Short:  "Write a manual page for every command into DIR",
			Hidden: true,
			Args:   cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := os.MkdirAll(args[0], 0o755); err != nil {
					return err
				}
				rootCmd.DisableAutoGenTag = true
				hdr := &doc.GenManHeader{Title: "POSTERN", Section: "1", Source: "postern " + version, Manual: "postern manual"}
				if err := doc.GenManTree(rootCmd, hdr, args[0]); err != nil {
					return fmt.Errorf("write manual pages to %s: %w", args[0], err)
				}
				return nil
			},
		}
		rootCmd.AddCommand(cmd)
	})
}
