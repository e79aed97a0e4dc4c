package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/carry/container"
	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/dispatch"
)

// The container harness: postern, bind-mounted into a container as its
// entrypoint, runs under this hidden first argument as the container's pid 1.

func init() {
	reexecs[container.InitArg] = func(args []string) int {
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, netwall.ForwardedSignals...)
		// SIGINT and SIGTERM are the command's to handle: the harness passes
		// them on instead of stopping.
		return container.Init(context.Background(), args, sigs, os.Stderr)
	}
}

// checkContainerFlags refuses --engine and --container-network without
// --container, and values they do not take.
func checkContainerFlags(cmd *cobra.Command, c dispatch.Container) error {
	if c.Image == "" {
		for _, name := range []string{"engine", "container-network"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --container IMAGE", name)
			}
		}
		return nil
	}
	switch c.Engine {
	case "", container.Podman, container.Docker:
	default:
		return fmt.Errorf("--engine %q: use %s or %s", c.Engine, container.Podman, container.Docker)
	}
	switch c.Network {
	case "", dispatch.ContainerNetworkNone:
	default:
		return fmt.Errorf("--container-network %q: the only value is %q (a container with no network at all); leave it out for the wall", c.Network, dispatch.ContainerNetworkNone)
	}
	if c.Network == dispatch.ContainerNetworkNone && cmd.Flags().Changed("egress-open") {
		return errors.New("--egress-open and --container-network none contradict each other: leave out one of them")
	}
	return nil
}
