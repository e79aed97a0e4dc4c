package main

import (
	"runtime"
	"testing"

	"github.com/postern-dev/postern/carry/netwall"
)

func TestLeaveCoresEarly(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	was := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(was)
	reset := func() { coresLeft = false; runtime.GOMAXPROCS(4) }
	for _, c := range []struct {
		args   []string
		capped bool
	}{
		{[]string{"postern", "run", "--", "true"}, true},
		{[]string{"postern", "run", "-q", "--", "sh", "-c", "exit 3"}, true},
		{[]string{"postern", "run", "--machine", "box", "--", "true"}, false},
		{[]string{"postern", "run", "--machine=box", "--", "true"}, false},
		{[]string{"postern", "run", "--", "echo", "--machine=x"}, false}, // left to the run command
		{[]string{"postern", "runs", "list"}, false},
		{[]string{"postern"}, false},
	} {
		reset()
		leaveCoresEarly(c.args)
		want := 4
		if c.capped && !netwall.SetsUpItself() {
			// Where postern sets the wall up itself, its threads do the
			// work beside one another: capped later (leaveCoresLater).
			want = 2
		}
		if got := runtime.GOMAXPROCS(0); got != want {
			t.Errorf("%q: GOMAXPROCS %d at the start, want %d", c.args, got, want)
		}
		leaveCoresToTheRun() // as the run command does on this machine
		if got := runtime.GOMAXPROCS(0); got != 2 {
			t.Errorf("%q: GOMAXPROCS %d once the run command capped too, want 2", c.args, got)
		}
	}
	reset()
	leaveCoresEarly([]string{"postern", "run", "--", "true"})
	takeCoresBack()
	if got := runtime.GOMAXPROCS(0); got != 4 || coresLeft {
		t.Errorf("after takeCoresBack: GOMAXPROCS %d (capped %v), want 4", got, coresLeft)
	}
	t.Setenv("GOMAXPROCS", "3")
	reset()
	leaveCoresEarly([]string{"postern", "run", "--", "true"})
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Errorf("GOMAXPROCS set: changed to %d, want it left at 4", got)
	}
}
