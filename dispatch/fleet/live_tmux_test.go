//go:build linux || darwin

package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/term"
)

// liveChildEnv names the fifo a child reads its steps from: the test binary
// run with it set is the program a person watches in the terminal.
const liveChildEnv = "POSTERN_FLEET_LIVE_CHILD"

func TestMain(m *testing.M) {
	if fifo := os.Getenv(liveChildEnv); fifo != "" {
		if err := liveChild(fifo); err != nil {
			fmt.Fprintln(os.Stderr, "live child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// liveChild runs a dispatch with a fake runner and a fake clock on its
// terminal, one step each time the test writes a line to the fifo.
func liveChild(fifo string) error {
	steps, err := os.Open(fifo)
	if err != nil {
		return err
	}
	defer steps.Close()
	next := bufio.NewScanner(steps)
	step := func() error {
		if !next.Scan() {
			return errors.New("no more steps")
		}
		return nil
	}
	f, err := Parse("tasks.hcl", []byte(`
per_machine = 1
task "fix-auth" { command = ["my-agent", "fix the failing auth test"] }
task "docs" {
  command  = ["my-agent", "update the docs"]
  machines = ["box"]
}
task "train" {
  command = ["python", "train.py"]
  needs   = ["gpu"]
}
task "lint" { command = ["make", "lint"] }
`))
	if err != nil {
		return err
	}
	clock := newFakeClock()
	size := func() (int, int) {
		w, h, err := term.GetSize(int(os.Stdout.Fd()))
		if err != nil {
			return 80, 24
		}
		return w, h
	}
	live := NewLive(os.Stdout, size, clock)
	changes := make(chan Change, 1000)
	runs := map[string]started{}
	r := newFakeRunner(func(context.Context, Attempt, func(RunEvent)) {})
	r.inline = true
	done := make(chan *Record, 1)
	go func() {
		rec, _ := Run(context.Background(), Config{ID: "20260314-092653-a1b2c3", File: f, Runner: r, Clock: clock,
			Machines: []Machine{walled("gpu1", "gpu=a100"), walled("gpu2"), walled("box")},
			OnChange: func(c Change, rec *Record) {
				live.Changed(c, rec)
				changes <- c
			}})
		done <- rec
	}()
	take := func(n int) {
		for range n {
			s := <-r.starts
			runs[s.a.Task.Name] = s
		}
	}
	report := func(task string, ev RunEvent) {
		s := runs[task]
		ev.Attempt = s.a.ID
		s.report(ev)
	}
	// waitFor takes changes until one matches: the dispatch has drawn it.
	waitFor := func(event, task string, st State) {
		for c := range changes {
			if c.Event == event && c.Task == task && (st == "" || c.State == st) {
				return
			}
		}
	}
	sec := time.Second

	// 1: three placed and running for 12 s; train waits for gpu1.
	if err := step(); err != nil {
		return err
	}
	take(3)
	for _, task := range []string{"fix-auth", "docs", "lint"} {
		report(task, RunEvent{Kind: RunStarted, RunID: "run-" + task})
		waitFor(EventTask, task, Running)
	}
	clock.Advance(12 * sec)

	// 2: a denial, above the live lines.
	if err := step(); err != nil {
		return err
	}
	report("fix-auth", RunEvent{Kind: RunDenied, Denial: Denial{Kind: "transparent", Host: "evil.example", Port: 443,
		Reason: `not in the policy's allow list; to allow it add "evil.example" to allow`}})
	waitFor(EventDenial, "fix-auth", "")
	clock.Advance(3 * sec)

	// 3: gpu2 drops: lint is lost and waits to be placed again.
	if err := step(); err != nil {
		return err
	}
	report("lint", RunEvent{Kind: RunLost, Err: errors.New("ssh: connection lost")})
	waitFor(EventTask, "lint", Queued)
	clock.Advance(26 * sec)

	// 4: fix-auth exits 0 at 41 s, train takes gpu1; docs fails 3, lint
	// takes box.
	if err := step(); err != nil {
		return err
	}
	report("fix-auth", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/run-fix-auth"})
	take(1)
	report("train", RunEvent{Kind: RunStarted, RunID: "run-train"})
	waitFor(EventTask, "train", Running)
	report("docs", RunEvent{Kind: RunExited, Code: 3, Branch: "postern/run-docs"})
	take(1)
	report("lint", RunEvent{Kind: RunStarted, RunID: "run-lint2"})
	waitFor(EventTask, "lint", Running)
	clock.Advance(7 * sec)

	// 5: the end: the last frame stays, the table below it.
	if err := step(); err != nil {
		return err
	}
	clock.Advance(60 * sec)
	report("train", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/run-train"})
	report("lint", RunEvent{Kind: RunExited, Code: 0, Branch: "postern/run-lint2"})
	rec := <-done
	live.Close()
	fmt.Print("\n" + Table(rec))
	// Hold the screen until the test has read it and closes the fifo.
	_ = step()
	return nil
}

// TestLiveInTmux watches a dispatch the way a person does: in a terminal
// (tmux, 100 columns by 24 rows), comparing the screen after each step.
func TestLiveInTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux is what the live lines are checked in: install it (apt-get install tmux): %v", err)
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "steps")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A server of its own, its socket in the test's directory.
	sock := filepath.Join(dir, "tmux.sock")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	child := fmt.Sprintf("env %s=%s %s", liveChildEnv, fifo, shellQuote(os.Args[0]))
	if out, err := tm("new-session", "-d", "-s", "live", "-x", "100", "-y", "24", child); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	if out, err := tm("set-option", "-t", "live", "remain-on-exit", "on"); err != nil {
		t.Fatalf("tmux set-option: %v: %s", err, out)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 1; i <= 5; i++ {
		if _, err := w.WriteString("next\n"); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		name := fmt.Sprintf("tmux-step%d", i)
		want := ""
		if !*update {
			wb, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
			if err != nil {
				t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
			}
			want = string(wb)
		}
		// tmux draws what it reads when it reads it: wait for the screen
		// to show the step, or give up and show what it shows.
		var screen string
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := tm("capture-pane", "-p", "-t", "live")
			if err != nil {
				t.Fatalf("capture-pane: %v: %s", err, out)
			}
			screen = trimScreen(out)
			if screen == want || time.Now().After(deadline) {
				break
			}
			if *update && strings.Contains(screen, stepMark[i]) {
				time.Sleep(200 * time.Millisecond) // let the step's last frame land before it is recorded
				out, _ := tm("capture-pane", "-p", "-t", "live")
				screen = trimScreen(out)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		golden(t, name, screen)
		if t.Failed() {
			return
		}
	}
}

// stepMark is text each step's screen shows, for -update.
var stepMark = map[int]string{
	1: "running on gpu2 for 12 s",
	2: "denied transparent evil.example:443",
	3: "running on box for 41 s",
	4: "running on gpu1 for 7 s",
	5: "exit 1",
}

// trimScreen drops the spaces that end lines and the empty lines that end
// the screen.
func trimScreen(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n") + "\n"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
