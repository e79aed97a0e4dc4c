//go:build !linux && !darwin

package agent

import (
	"fmt"
	"os"
	"runtime"
)

// openPTY: agents are built for Linux and macOS.
func openPTY() (master *os.File, mfd int, slave *os.File, err error) {
	return nil, 0, nil, fmt.Errorf("a terminal for a remote run is not available on %s", runtime.GOOS)
}
