package dispatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postern-dev/postern/records"
)

// checkCommand finds a command as a shell does, and says 127 for one that is
// not there and 126 for one that cannot be executed.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(filepath.Join(bin, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("tool", 0o755)
	write("plain", 0o644)
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	// plain is executable in a later PATH entry: that one is found.
	if err := os.WriteFile(filepath.Join(other, "shadowed"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("shadowed", 0o644)
	env := []string{"PATH=" + bin + ":" + other}
	for _, c := range []struct {
		argv []string
		end  string // "" is found
		code int
	}{
		{[]string{"tool"}, "", 0},
		{[]string{"shadowed"}, "", 0},
		{[]string{"bin/tool"}, "", 0}, // relative to the run's directory
		{[]string{filepath.Join(bin, "tool")}, "", 0},
		{[]string{"missing"}, records.EndNotFound, 127},
		{[]string{"subdir"}, records.EndNotFound, 127}, // a directory in PATH is no command
		{[]string{"plain"}, records.EndNotExecutable, 126},
		{[]string{"bin/plain"}, records.EndNotExecutable, 126},
		{[]string{"./bin/subdir"}, records.EndNotExecutable, 126},
		{[]string{"./bin/missing"}, records.EndNotFound, 127},
		{[]string{""}, records.EndNotFound, 127},
		{nil, records.EndNotFound, 127},
	} {
		ce := checkCommand(c.argv, dir, env, false)
		switch {
		case c.end == "" && ce != nil:
			t.Errorf("%q: %v, want it found", c.argv, ce)
		case c.end != "" && ce == nil:
			t.Errorf("%q: found, want %s", c.argv, c.end)
		case ce != nil && (ce.End() != c.end || ce.Code() != c.code):
			t.Errorf("%q: %v (%s, %d), want %s, %d", c.argv, ce, ce.End(), ce.Code(), c.end, c.code)
		}
	}
	// Without PATH, the wall's default is searched.
	if ce := checkCommand([]string{"sh"}, dir, nil, false); ce != nil {
		t.Errorf("sh without PATH: %v", ce)
	}
	if ce := checkCommand([]string{"missing"}, dir, nil, false); ce == nil || !strings.Contains(ce.Error(), defaultPath) {
		t.Errorf("missing without PATH: %v, want the default PATH named", ce)
	}
	// A PATH given with --env is a value: never in the error, which the
	// record keeps.
	secretPath := "PATH=/opt/s3cr3t-dir"
	if ce := checkCommand([]string{"missing"}, dir, []string{secretPath}, pathPassed([]string{secretPath})); ce == nil || strings.Contains(ce.Error(), "s3cr3t") || !ce.NotFound {
		t.Errorf("missing with a passed PATH: %v", ce)
	}
}
