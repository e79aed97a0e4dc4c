package procstat

import (
	"os"
	"os/exec"
	"testing"
)

func TestStartTime(t *testing.T) {
	self := StartTime(os.Getpid())
	if self == 0 {
		t.Fatalf("StartTime(%d) = 0 for this process", os.Getpid())
	}
	if again := StartTime(os.Getpid()); again != self {
		t.Fatalf("StartTime of this process changed: %d then %d", self, again)
	}
	// A process started later started no earlier.
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if child := StartTime(cmd.Process.Pid); child < self {
		t.Fatalf("child started at %d, before this process (%d)", child, self)
	}
	if got := StartTime(-1); got != 0 {
		t.Fatalf("StartTime(-1) = %d, want 0", got)
	}
}
