package container

import (
	"strings"
	"testing"
)

func TestRefusedRlimit(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		want   int
		ok     bool
	}{
		// runc 1.1, through podman 4.3 (as measured on a machine whose hard
		// limits are below podman's defaults).
		{"Error: runc: runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied", 7, true},
		{"error setting rlimit type 6: operation not permitted", 6, true},
		// crun's spelling.
		{"Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied", 7, true},
		{"setrlimit RLIMIT_NPROC: Operation not permitted", 6, true},
		{"error setting rlimit type 99: operation not permitted", 0, false},
		{"Error: short-name \"x\" did not resolve to an alias", 0, false},
		{"error setting rlimit type 7: invalid argument", 0, false},
		{"", 0, false},
	} {
		got, ok := refusedRlimit(tc.stderr)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("refusedRlimit(%.60q) = %d, %v; want %d, %v", tc.stderr, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAdaptRlimitLowersThenGivesUp(t *testing.T) {
	e := &Engine{Name: Podman}
	const nofile = 7
	first, ok := e.adaptRlimit(nofile)
	if !ok || !strings.HasPrefix(first, "nofile=") {
		t.Fatalf("first adaptation %q, %v", first, ok)
	}
	prev := e.ulimits[nofile]
	steps := 0
	for {
		_, ok := e.adaptRlimit(nofile)
		if !ok {
			break
		}
		if e.ulimits[nofile] >= prev {
			t.Fatalf("limit went from %d to %d, want lower", prev, e.ulimits[nofile])
		}
		prev = e.ulimits[nofile]
		if steps++; steps > 64 {
			t.Fatal("adaptation never gives up")
		}
	}
	if prev < minRlimit {
		t.Fatalf("adapted below %d: %d", minRlimit, prev)
	}
	flags := strings.Join(e.ulimitFlags(), " ")
	if !strings.HasPrefix(flags, "--ulimit nofile=") {
		t.Fatalf("flags %q", flags)
	}
	if s := e.String(); !strings.Contains(s, "adapted: --ulimit nofile=") {
		t.Fatalf("String() %q does not say what was adapted", s)
	}
}
