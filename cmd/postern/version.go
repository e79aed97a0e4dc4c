package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo is what 'postern version' tells: one shape, every key always there.
type versionInfo struct {
	Version string `json:"version"`
	// Commit is the git commit postern was built from ("" when unknown),
	// with "-dirty" when the work tree had changes.
	Commit string `json:"commit"`
	Go     string `json:"go"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
}

// commit is set at build time with -ldflags "-X main.commit=…" ('make build');
// without it, the commit Go stamped into the binary, if any.
var commit string

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Commit: commit, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok && v.Commit == "" {
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && v.Commit != "" {
			v.Commit += "-dirty"
		}
	}
	return v
}

func init() {
	buildCommands = append(buildCommands, func() {
		var asJSON bool
		cmd := &cobra.Command{
			Use:   "version",
			Short: "Print postern's version, the commit it was built from, its Go and its OS/architecture",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				v := buildVersion()
				if asJSON {
					return writeJSON(os.Stdout, v)
				}
				commit := v.Commit
				if commit == "" {
					commit = "unknown"
				}
				fmt.Printf("postern %s (commit %s, %s, %s/%s)\n", v.Version, commit, v.Go, v.OS, v.Arch)
				return nil
			},
		}
		cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: version, commit, go, os, arch")
		rootCmd.AddCommand(cmd)
	})
}
