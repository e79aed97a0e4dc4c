package testhosts

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// ErrNoCC says there is no C compiler to build the wall's small pid 1 with.
var ErrNoCC = errors.New("no C compiler (musl-gcc or cc): apt-get install gcc musl-tools")

// BuildPid1 builds the wall's small pid 1 (carry/netwall/pid1c) at out, as
// make builds it: with musl where it is installed, else with cc. Where there is no C compiler it returns ErrNoCC, unless
// POSTERN_REQUIRE_PRIVILEGED=1, where the walls the tests raise must be the
// ones a build with it raises: then that is an error like any other.
func BuildPid1(out string) error {
	cc, err := exec.LookPath("musl-gcc")
	if err != nil {
		cc, err = exec.LookPath("cc")
	}
	if err != nil {
		if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
			return fmt.Errorf("build the wall's pid 1: %v (POSTERN_REQUIRE_PRIVILEGED=1)", ErrNoCC)
		}
		return ErrNoCC
	}
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return errors.New("build the wall's pid 1: this source file's path is unknown")
	}
	src := filepath.Join(filepath.Dir(here), "..", "..", "carry", "netwall", "pid1c", "pid1.c")
	tmp := out + ".tmp"
	cmd := exec.Command(cc, "-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o", tmp, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the wall's pid 1: %v\n%s", err, b)
	}
	// Renamed into place: nothing holds a descriptor of it open for writing
	// when it is executed.
	return os.Rename(tmp, out)
}
