//go:build !linux

package dispatch

import (
	"fmt"
	"os"
	"runtime"
)

// openTerminal: a walled run, the only user of a run terminal, is Linux only.
func openTerminal(keys, screen *os.File) (*terminal, error) {
	return nil, fmt.Errorf("a terminal for a walled run is not available on %s", runtime.GOOS)
}
