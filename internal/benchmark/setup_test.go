//go:build linux

package benchmark

import (
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCapIdleTunnels(t *testing.T) {
	var notes []string
	got, err := capIdleTunnels(10, &notes)
	if err != nil || got != 10 || len(notes) != 0 {
		t.Fatalf("capIdleTunnels(10) = %d, %v, notes %q; want 10, no note", got, err, notes)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	most := (int(lim.Cur) - 300) / 2
	got, err = capIdleTunnels(most+1, &notes)
	if err != nil || got != most {
		t.Fatalf("capIdleTunnels(%d) = %d, %v; want %d", most+1, got, err, most)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "idle tunnels capped at") {
		t.Fatalf("notes = %q, want one saying the tunnels were capped", notes)
	}
}

func TestWorkDirWithPosternKeepsAGivenBinary(t *testing.T) {
	for _, c := range []struct {
		bin   string
		build bool
	}{{"/given/postern", true}, {"", false}} {
		dir, bin, err := workDirWithPostern(context.Background(), nil, "postern-setup-test-", c.bin, c.build)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		os.RemoveAll(dir)
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("work dir %s: %v, mode %v; want 0755", dir, err, fi.Mode())
		}
		if bin != c.bin {
			t.Fatalf("bin = %q, want %q (nothing built)", bin, c.bin)
		}
	}
}
