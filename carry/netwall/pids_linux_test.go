package netwall

import (
	"os"
	"path/filepath"
	"testing"
)

// A v2 parent that does not hand the pids controller down gets no cgroup
// made (and removed again) under it: the run's limit goes to the next way.
func TestNoV2CgroupWithoutThePidsController(t *testing.T) {
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("hugetlb memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := makeCgroup(parent, "postern-test", 64, 2); err == nil || c != nil {
		t.Fatalf("makeCgroup under a parent without pids: %v, %v", c, err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Fatalf("made under it: %v", ents)
	}
}
