package testhosts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTreeChangesSeesEveryKind(t *testing.T) {
	root := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kept", "same")
	write("edited", "before")
	write("gone", "x")
	if err := os.Symlink("kept", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	before, err := TreeSums(root)
	if err != nil {
		t.Fatal(err)
	}
	write("edited", "after")
	write("new", "y")
	os.Remove(filepath.Join(root, "gone"))
	os.Remove(filepath.Join(root, "link"))
	if err := os.Symlink("edited", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	after, err := TreeSums(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range TreeChanges(before, after) {
		name, _, _ := strings.Cut(c, " ")
		got = append(got, name)
	}
	want := []string{"edited", "gone", "link", "new"}
	if !slices.Equal(got, want) {
		t.Fatalf("changed paths %q, want %q (changes %q)", got, want, TreeChanges(before, after))
	}
	if c := TreeChanges(after, after); len(c) != 0 {
		t.Fatalf("a tree against itself: %q", c)
	}
}
