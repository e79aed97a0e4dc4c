//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runToEnd runs cmd to completion and returns its stdout, stderr and exit
// code (-1 for a signal); a command that could not be run fails the test.
func runToEnd(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %q: %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, err, o.String(), e.String())
	}
	return o.String(), e.String(), code
}

// startBackground starts cmd with its stdout and stderr kept, and waits for
// it in the background: waited is closed when it has ended. A command still
// running when the test ends is killed and waited on.
func startBackground(t *testing.T, cmd *exec.Cmd) (stdout, stderr *lockedLog, waited <-chan struct{}) {
	t.Helper()
	stdout, stderr = &lockedLog{}, &lockedLog{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	return stdout, stderr, done
}

// homeCopy is a new POSTERN_HOME of the test's own holding a copy of the
// store in home, so that the test's runs are its own.
func homeCopy(t *testing.T, home string) string {
	t.Helper()
	dst := t.TempDir()
	data, err := os.ReadFile(filepath.Join(home, "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "records.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}
