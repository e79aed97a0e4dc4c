//go:build !linux

package agent

import (
	"fmt"
	"os"
	"runtime"
)

// openPTY is Linux's alone for now: agents are built for Linux.
func openPTY() (master *os.File, mfd int, slave *os.File, err error) {
	return nil, 0, nil, fmt.Errorf("a terminal for a remote run is not available on %s", runtime.GOOS)
}
