//go:build darwin || linux

package seatbelt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain also serves as postern's last step (ExecArg) when the launcher
// starts this test binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ExecArg {
		err := ExecMain(os.Args[2:])
		fmt.Fprintln(os.Stderr, "postern:", err)
		if errors.Is(err, ErrCommandNotFound) {
			os.Exit(127)
		}
		os.Exit(126)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	Self = self
	os.Exit(m.Run())
}

// standIn is a launcher that drops "-p PROFILE" and starts the command
// unconfined, keeping the profile it was given in profileFile.
func standIn(profileFile string) []string {
	return []string{"/bin/sh", "-c", `printf '%s' "$2" > "$0"; shift 2; exec "$@"`, profileFile}
}

func raise(t *testing.T, spec Spec) (*Wall, string) {
	t.Helper()
	profileFile := filepath.Join(t.TempDir(), "profile.sb")
	spec.Launcher = standIn(profileFile)
	w, err := Raise(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, profileFile
}
