//go:build !linux && !darwin

package probe

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
)

// The Linux rungs answer no elsewhere: there is nothing to measure.
func rungs() []measurement {
	notLinux := func(ctx context.Context) Rung {
		return no(fmt.Sprintf("%s is not Linux", runtime.GOOS), "")
	}
	return []measurement{
		{RungUserns, notLinux},
		{RungNetns, notLinux},
		{RungNetnsRedirect, notLinux},
		{RungIPv6, notLinux},
		{RungLandlock, notLinux},
		{RungOverlay, notLinux},
	}
}

func kernelRelease() string { return "" }

func osVersion() string { return "" }

func currentUID() int { return os.Getuid() }

// ChildMain has no children to run off Linux.
func ChildMain(ctx context.Context, arg string, args []string, stdout io.Writer) int {
	fmt.Fprintf(stdout, "probe child %q only runs on Linux\n", arg)
	return 2
}
