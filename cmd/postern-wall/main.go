//go:build linux

// Command postern-wall is the network wall's init as an executable of its
// own: pid 1 of a run's namespaces, started by postern, never by people. A
// build attaches it to the postern binary (internal/wallimage), which keeps
// it beside its records and starts it for each walled run rather than
// re-executing all of itself. Build it with -tags postern_wallinit, which
// leaves the wall's host side (and the door, the records and the command
// line it brings) out.
package main

import (
	"fmt"
	"os"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/internal/hugetext"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case netwall.InitArg:
			os.Exit(netwall.InitMain(os.Args[2:]))
		case netwall.ExecArg:
			os.Exit(netwall.ExecMain(os.Args[2:]))
		case hugetext.Arg:
			// postern, turned into this at its exit to prime its own
			// executable for its later starts (internal/hugetext).
			os.Exit(hugetext.Main(os.Args[2:]))
		}
	}
	fmt.Fprintln(os.Stderr, "postern-wall is the network wall's init: postern starts it for each run")
	os.Exit(2)
}
