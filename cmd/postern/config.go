package main

import (
	"fmt"
	"github.com/postern-dev/postern/machine/sshclient"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postern-dev/postern/internal/config"
)

// userConfig is the config file's defaults, read before any command runs.
var userConfig config.Config

func init() { cobra.OnInitialize(loadUserConfig) }

// loadUserConfig reads the config file and makes its settings the defaults
// of the flags they stand for; a flag given wins. A file that cannot be used
// stops postern with its file:line:col, as bad input (2).
func loadUserConfig() {
	path, err := config.Path()
	if err == nil {
		userConfig, err = config.Load(path)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "postern: config: %v\n", err)
		os.Exit(2)
	}
	c := userConfig
	set := func(path []string, name, value string) {
		if value == "" {
			return
		}
		cmd, _, err := rootCmd.Find(path)
		if err != nil || cmd == nil {
			return
		}
		f := cmd.Flags().Lookup(name)
		if f == nil || f.Changed {
			return
		}
		setDefault(f, value)
	}
	set([]string{"run"}, "policy", c.Policy)
	set([]string{"run"}, "machine", c.Machine)
	if c.ConnectTimeout > 0 {
		d := c.ConnectTimeout.String()
		set([]string{"run"}, "connect-timeout", d)
		set([]string{"machine", "probe-confinement"}, "connect-timeout", d)
		set([]string{"machine", "add"}, "connect-timeout", d)
	}
}

// setDefault gives an unset flag a value, not marking it as given.
func setDefault(f *pflag.Flag, value string) {
	if err := f.Value.Set(value); err == nil {
		f.DefValue = value
	}
}

// withSSHConfig fills in the ssh settings the config file has and o leaves unset.
func withSSHConfig(o sshclient.Options) sshclient.Options {
	if o.ConfigFile == "" {
		o.ConfigFile = userConfig.SSH.Config
	}
	if o.KnownHostsFile == "" {
		o.KnownHostsFile = userConfig.SSH.KnownHosts
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = userConfig.ConnectTimeout
	}
	return o
}
