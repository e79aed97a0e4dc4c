package ownns

import (
	"path/filepath"
	"testing"

	"github.com/postern-dev/postern/records"
)

func TestRunsWallHere(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"postern", "run", "--", "true"}, true},
		{[]string{"postern", "run", "--policy", "p.hcl", "-q", "--", "true"}, true},
		{[]string{"postern", "run", "true"}, true},
		{[]string{"postern", "run", "--machine", "local", "--", "true"}, true},
		{[]string{"postern", "run", "--machine=local", "--", "true"}, true},
		{[]string{"postern", "run", "--machine", "gpu1", "--", "true"}, false},
		{[]string{"postern", "run", "--machine=gpu1", "--", "true"}, false},
		{[]string{"postern", "run", "--machine"}, false},
		{[]string{"postern", "run", "--container", "alpine", "--", "true"}, false},
		{[]string{"postern", "run", "--container=alpine", "--", "true"}, false},
		{[]string{"postern", "run", "--egress-open", "offline build", "--", "true"}, false},
		{[]string{"postern", "run", "--egress-open=why", "--", "true"}, false},
		// The command's own words are its own.
		{[]string{"postern", "run", "--", "ssh", "--machine", "x"}, true},
		{[]string{"postern", "run", "--", "podman", "--container=x"}, true},
		{[]string{"postern", "dispatch", "tasks.hcl"}, false},
		{[]string{"postern", "machine", "probe-confinement"}, false},
		{[]string{"postern"}, false},
		{nil, false},
	} {
		if got := RunsWallHere(tc.args); got != tc.want {
			t.Errorf("RunsWallHere(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// The init directory is "lib" beside the records wherever they are.
func TestInitDirIsBesideTheRecords(t *testing.T) {
	for _, tc := range []struct{ home, state, posternHome string }{
		{"/home/u", "", ""},
		{"/home/u", "/home/u/.state/", ""},
		{"/home/u", "/x", "/srv/postern//"},
		{"/home/u/", "", "relative/home"},
	} {
		t.Setenv("HOME", tc.home)
		t.Setenv("XDG_STATE_HOME", tc.state)
		t.Setenv("POSTERN_HOME", tc.posternHome)
		db, err := records.DefaultPath()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := InitDir(), filepath.Join(filepath.Dir(db), "lib"); got != want {
			t.Errorf("%+v: InitDir() = %q, want %q", tc, got, want)
		}
	}
}
