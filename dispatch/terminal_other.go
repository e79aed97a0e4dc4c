//go:build !linux && !darwin

package dispatch

import (
	"fmt"
	"os"
	"runtime"
)

// openTerminal: walled runs, the only users of a run terminal, are Linux and macOS ones.
func openTerminal(keys, screen *os.File) (*terminal, error) {
	return nil, fmt.Errorf("a terminal for a walled run is not available on %s", runtime.GOOS)
}
