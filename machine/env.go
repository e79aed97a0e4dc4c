package machine

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadEnvName is returned for environment variable names that cannot be
// passed to a run.
var ErrBadEnvName = errors.New("bad environment variable name")

// CheckEnvName reports whether name can name a variable passed to runs: not
// empty, and without '=', NUL or white space. A machine's env list holds
// names only: its values come from postern's environment at each run and are
// never stored.
func CheckEnvName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrBadEnvName)
	case strings.Contains(name, "="):
		// What follows '=' may be a value: never repeated.
		k, _, _ := strings.Cut(name, "=")
		return fmt.Errorf("%w %q: a name has no '=' (names only: the value comes from postern's environment at each run)", ErrBadEnvName, k+"=...")
	case strings.ContainsAny(name, " \t\r\n\x00"):
		return fmt.Errorf("%w %q: a name has no '=', NUL or white space (the value is never written here, only the name)", ErrBadEnvName, name)
	}
	return nil
}
