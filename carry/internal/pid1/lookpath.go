package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrNotFound is a command name found nowhere on PATH (a shell's 127).
var ErrNotFound = errors.New("command not found")

// LookPath finds the command a run names as its shell would: a name with a
// slash is taken as it is; any other is looked up on PATH, which is set to
// fallback first when the run's environment has none.
func LookPath(name, fallback string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", fallback)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %q in PATH=%s", ErrNotFound, name, os.Getenv("PATH"))
	}
	return p, nil
}
