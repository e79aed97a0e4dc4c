//go:build !linux && !darwin

package probe

import (
	"context"
	"fmt"
	"io"
)

// The Linux rungs answer no elsewhere: there is nothing to measure.
func rungs() []measurement {
	return notLinuxRungs(RungUserns, RungNetns, RungNetnsRedirect, RungIPv6, RungLandlock, RungOverlay)
}

func osVersion() string { return "" }

// ChildMain has no children to run off Linux.
func ChildMain(ctx context.Context, arg string, args []string, stdout io.Writer) int {
	fmt.Fprintf(stdout, "probe child %q only runs on Linux\n", arg)
	return 2
}
