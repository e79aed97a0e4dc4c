package fleet

import (
	"context"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/machine"
)

// Runner starts one attempt of a task on one machine: one run.
//
// Start returns at once; the run goes on in goroutines the runner owns, and
// tells what happens through report, which is safe to call from any goroutine
// and never blocks past the end of the dispatch. For every Start the runner
// reports at most one RunStarted, any number of RunDenied, and then exactly
// one of RunExited, RunFailed or RunLost, also when ctx is cancelled: a
// cancelled run is stopped on its machine (within 5 s) and then reported as
// it ended.
type Runner interface {
	Start(ctx context.Context, a Attempt, report func(RunEvent))
}

// Attempt is what a runner is asked to start.
type Attempt struct {
	// ID names the attempt in the runner's events; it is unique in the
	// dispatch.
	ID       int
	Dispatch string
	Task     Task
	// Number counts the task's attempts: 1 at its first placement, 2 once
	// placed again after a loss.
	Number  int
	Machine Machine
	Lane    machine.Lane
	Carry   carry.Carry
}

// RunEventKind says what a RunEvent reports.
type RunEventKind int

const (
	// RunStarted: the run has begun on its machine (its workspace shipped,
	// its wall raised); RunID names it.
	RunStarted RunEventKind = iota + 1
	// RunDenied: the door refused one of the run's connections (Denial).
	RunDenied
	// RunExited: the run's command exited with Code; Branch is the result
	// branch that came home, if any.
	RunExited
	// RunFailed: the run could not be run or did not end by its command's
	// exit (Err); the task is not placed again. A *carry.Refusal (the
	// machine refused the wall when it was raised) makes the task refused.
	RunFailed
	// RunLost: the machine dropped (ssh cut, agent gone) under the run
	// (Err); the machine is taken out of the dispatch and the task placed
	// again elsewhere while its retries last. The machine's other runs are
	// left to their runner: each is lost, or ends, as it reports.
	RunLost

	// Kinds the dispatch sends itself.
	runTimedOut
	runGraceOver
)

// RunEvent is one thing a runner reports about an attempt.
type RunEvent struct {
	Attempt int
	Kind    RunEventKind
	RunID   string
	Code    int
	Branch  string
	Err     error
	Denial  Denial
}

// DenialOf is the denial a door event reports, if it reports one: a decision
// that denied, or in observe mode would have denied, a connection.
func DenialOf(ev event.Event) (Denial, bool) {
	if ev.Event != event.Decided || (ev.Decision != event.Deny && !ev.WouldDeny) {
		return Denial{}, false
	}
	return Denial{Kind: string(ev.Kind), Host: ev.Host, Port: ev.Port, Reason: ev.Reason, WouldDeny: ev.WouldDeny, Repeats: ev.Repeats}, true
}

// Clock is the dispatch's time: the real one, or a test's.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless
	// stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop keeps f from being called, and reports whether it did.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
