package procstat

import (
	"os"
	"os/exec"
	"testing"
	"time"
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

// A child that ended and was not waited for is a zombie: it keeps its start
// time, and Exited says it is gone; a running process is not.
func TestExitedZombie(t *testing.T) {
	if Exited(os.Getpid()) {
		t.Fatal("this process counts as exited")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for !Exited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the ended child %d never counted as exited", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if StartTime(pid) == 0 {
		t.Fatal("a zombie has no start time: the test shows nothing")
	}
	_ = cmd.Wait()
	if Exited(pid) || StartTime(pid) != 0 {
		t.Fatal("a reaped child is still there")
	}
}
