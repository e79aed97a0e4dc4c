package fleet

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/postern-dev/postern/internal/termtext"
)

// Frame is what a terminal shows of a dispatch at now: a header with the
// slots in use and the machines, then one line per task. It fits in width
// columns and height rows (0: no bound): when the tasks do not fit, the
// running and the unhappy ones are shown and a last line counts the others.
func Frame(r *Record, now time.Time, width, height int) []string {
	used, total := r.Slots()
	counts := map[State]int{}
	for _, t := range r.Tasks {
		counts[t.State]++
	}
	var head strings.Builder
	fmt.Fprintf(&head, "dispatch %s · slots %d/%d in use", r.ID, used, total)
	if r.Max > 0 {
		fmt.Fprintf(&head, " (max %d)", r.Max)
	}
	head.WriteString(" · " + countList(counts))
	if r.State != Running {
		fmt.Fprintf(&head, " · %s after %s", r.State, dur(r.EndedAt.Sub(r.StartedAt)))
	}
	machines := make([]string, 0, len(r.Machines))
	for _, m := range r.Machines {
		if m.State == Unreachable {
			machines = append(machines, m.Name+" unreachable")
			continue
		}
		if m.Takes == 0 {
			machines = append(machines, m.Name+" takes none")
			continue
		}
		machines = append(machines, fmt.Sprintf("%s %d/%d", m.Name, m.Running, m.Slots))
	}
	lines := []string{head.String(), "  " + strings.Join(machines, " · ")}

	nameWidth := 0
	for _, t := range r.Tasks {
		nameWidth = max(nameWidth, min(len(t.Name), 24))
	}
	room := len(r.Tasks)
	if height > 0 {
		room = height - len(lines) - 1 // and the line the cursor waits on
	}
	shown := pickShown(r.Tasks, room)
	for _, i := range shown {
		t := &r.Tasks[i]
		lines = append(lines, fmt.Sprintf("  %-*s  %s", nameWidth, t.Name, taskText(t, now)))
	}
	if hidden := len(r.Tasks) - len(shown); hidden > 0 {
		rest := map[State]int{}
		for i := range r.Tasks {
			if !slices.Contains(shown, i) {
				rest[r.Tasks[i].State]++
			}
		}
		lines = append(lines, fmt.Sprintf("  … and %d more: %s", hidden, countList(rest)))
	}
	for i, l := range lines {
		lines[i] = clip(l, width)
	}
	return lines
}

// stateOrder is the order counts are listed in.
var stateOrder = []State{Running, Starting, Queued, Exited, Failed, Refused, Lost, Cancelled}

func countList(counts map[State]int) string {
	var parts []string
	for _, s := range stateOrder {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(parts) == 0 {
		return "no tasks"
	}
	return strings.Join(parts, ", ")
}

// pickShown chooses the tasks a frame of room lines shows, in file order.
func pickShown(tasks []TaskRecord, room int) []int {
	all := make([]int, len(tasks))
	for i := range all {
		all[i] = i
	}
	if len(tasks) <= room {
		return all
	}
	if room <= 1 {
		return nil
	}
	rank := func(s State) int {
		switch s {
		case Running, Starting:
			return 0
		case Failed, Lost, Refused, Cancelled:
			return 1
		case Queued:
			return 2
		}
		return 3
	}
	slices.SortStableFunc(all, func(a, b int) int { return rank(tasks[a].State) - rank(tasks[b].State) })
	shown := all[:room-1]
	slices.Sort(shown)
	return shown
}

// taskText is a task's state in words, as of now.
func taskText(t *TaskRecord, now time.Time) string {
	var b strings.Builder
	if len(t.Attempts) > 1 {
		var lostOn []string
		for _, a := range t.Attempts[:len(t.Attempts)-1] {
			lostOn = append(lostOn, a.Machine)
		}
		last := t.Attempts[len(t.Attempts)-1]
		fmt.Fprintf(&b, "lost on %s, placed again on %s · ", strings.Join(lostOn, ", "), last.Machine)
	}
	var last *AttemptRecord
	if n := len(t.Attempts); n > 0 {
		last = &t.Attempts[n-1]
	}
	switch t.State {
	case Queued:
		if last != nil && last.State == Lost {
			b.Reset()
			lostOn := make([]string, len(t.Attempts))
			for i, a := range t.Attempts {
				lostOn[i] = a.Machine
			}
			fmt.Fprintf(&b, "lost on %s, queued to be placed again", strings.Join(lostOn, ", "))
		} else {
			b.WriteString("queued")
		}
	case Starting:
		fmt.Fprintf(&b, "starting on %s", last.Machine)
	case Running:
		fmt.Fprintf(&b, "running on %s for %s", last.Machine, dur(now.Sub(last.StartedAt)))
	case Exited, Failed:
		if t.Exit != nil && last != nil {
			word := "exited"
			if t.State == Failed {
				word = "failed"
			}
			fmt.Fprintf(&b, "%s %d in %s on %s", word, *t.Exit, dur(attemptDur(last)), last.Machine)
			if t.Why != "" {
				b.WriteString(": " + termtext.Printable(t.Why))
			}
		} else {
			b.WriteString("failed")
			if last != nil {
				b.WriteString(" on " + last.Machine)
			}
			b.WriteString(": " + termtext.Printable(t.Why))
		}
	case Lost:
		if last == nil {
			b.WriteString("lost: " + termtext.Printable(t.Why))
		} else {
			b.Reset()
			lostOn := make([]string, len(t.Attempts))
			for i, a := range t.Attempts {
				lostOn[i] = a.Machine
			}
			fmt.Fprintf(&b, "lost on %s: %s", strings.Join(lostOn, ", "), termtext.Printable(t.Why))
		}
	case Refused:
		b.WriteString("refused: " + termtext.Printable(t.Why))
	case Cancelled:
		b.WriteString("cancelled")
		if last != nil {
			fmt.Fprintf(&b, " on %s after %s", last.Machine, dur(attemptDur(last)))
		}
	default:
		b.WriteString(string(t.State))
	}
	if t.Denials > 0 {
		fmt.Fprintf(&b, " · %s", plural(t.Denials, "denial"))
	}
	return b.String()
}

func attemptDur(a *AttemptRecord) time.Duration {
	began := a.PlacedAt
	if !a.StartedAt.IsZero() {
		began = a.StartedAt
	}
	if a.EndedAt.IsZero() {
		return 0
	}
	return a.EndedAt.Sub(began)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// dur is a duration as a person reads it on a live line: "41 s", "2 m 5 s",
// "1 h 3 m"; below a second, "0.05 s".
func dur(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return strconv.FormatFloat(math.Round(d.Seconds()*100)/100, 'f', -1, 64) + " s"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d m %d s", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%d h %d m", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// clip cuts a line to width columns (runes), marking the cut; width <= 0
// leaves it whole.
func clip(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) < width {
		return s
	}
	r := []rune(s)
	return string(r[:max(width-2, 0)]) + "…"
}

// PlainLine is one change as one line, for output that is not a terminal.
func PlainLine(c Change) string {
	return c.Time.UTC().Format(time.RFC3339) + " " + changeText(c)
}

// AboveLine is a change as a terminal shows it above the live lines: a
// denial prefixed by the task's name, a refusal, a machine lost.
func AboveLine(c Change) string { return changeText(c) }

func changeText(c Change) string {
	why := ""
	if c.Why != "" {
		why = ": " + termtext.Printable(c.Why)
	}
	on := ""
	if c.Machine != "" {
		on = " on " + c.Machine
	}
	switch c.Event {
	case EventDispatch:
		if c.Exit != nil {
			return fmt.Sprintf("dispatch %s %s, exit %d", c.Dispatch, c.State, *c.Exit)
		}
		return fmt.Sprintf("dispatch %s %s", c.Dispatch, c.State)
	case EventMachine:
		return fmt.Sprintf("machine %s %s%s", c.Machine, c.State, why)
	case EventDenial:
		d := c.Denial
		if d == nil {
			return c.Task + ": denial"
		}
		target := d.Host
		if d.Port != 0 {
			target += ":" + strconv.Itoa(int(d.Port))
		}
		verb := "denied " + d.Kind
		if d.Kind == "wall" {
			verb = "the wall refused"
		}
		if d.WouldDeny {
			verb = "observed (enforce would deny) " + d.Kind
		}
		more := ""
		if d.Repeats > 0 {
			more = fmt.Sprintf(" (and %d more like it)", d.Repeats)
		}
		return fmt.Sprintf("%s: %s %s%s: %s", c.Task, verb, termtext.Printable(target), more, termtext.Printable(d.Reason))
	}
	attempt := ""
	if c.Attempt != 0 {
		attempt = " (attempt " + strconv.Itoa(c.Attempt) + ")"
	}
	took := " in " + dur(time.Duration(c.DurationMS)*time.Millisecond)
	result := ""
	if c.Branch != "" {
		result = ", result " + c.Branch
	}
	switch c.State {
	case Queued:
		if c.PlacedAgain {
			return c.Task + " queued to be placed again" + why
		}
		return c.Task + " queued"
	case Starting:
		return c.Task + " starting" + on + attempt
	case Running:
		return c.Task + " running" + on + attempt + ", run " + c.Run
	case Exited, Failed:
		if c.Exit != nil {
			return fmt.Sprintf("%s %s %d%s%s%s%s", c.Task, c.State, *c.Exit, took, on, result, why)
		}
		return c.Task + " failed" + on + why
	case Lost, Cancelled:
		if c.Attempt != 0 {
			return c.Task + " " + string(c.State) + on + " after" + strings.TrimPrefix(took, " in") + why
		}
		return c.Task + " " + string(c.State) + why
	}
	return c.Task + " " + string(c.State) + on + why
}

// JSONLine is one change as one JSON object and a newline, for --json.
func JSONLine(c Change) []byte {
	c.Time = c.Time.UTC()
	b, err := json.Marshal(c)
	if err != nil {
		// A Change holds only strings, numbers and times.
		panic(fmt.Sprintf("fleet: marshal change: %v", err))
	}
	return append(b, '\n')
}

// Table is the summary table printed when a dispatch ends: task, machine, state,
// exit, duration, result branch, denials; then a line per task that did not
// end by its command's own exit, and the counts.
func Table(r *Record) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tMACHINE\tSTATE\tEXIT\tDURATION\tRESULT BRANCH\tDENIALS")
	for i := range r.Tasks {
		t := &r.Tasks[i]
		mach, took, exit, branch := "-", "-", "-", "-"
		if n := len(t.Attempts); n > 0 {
			last := &t.Attempts[n-1]
			mach = last.Machine
			if !last.EndedAt.IsZero() {
				took = dur(attemptDur(last))
			}
		}
		if t.Exit != nil {
			exit = strconv.Itoa(*t.Exit)
		}
		if t.Branch != "" {
			branch = t.Branch
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", t.Name, mach, t.State, exit, took, branch, t.Denials)
	}
	tw.Flush()
	for i := range r.Tasks {
		t := &r.Tasks[i]
		var notes []string
		for j, a := range t.Attempts {
			if j == len(t.Attempts)-1 {
				break
			}
			notes = append(notes, fmt.Sprintf("attempt %d on %s %s: %s", j+1, a.Machine, a.State, termtext.Printable(a.Why)))
		}
		if t.Why != "" && t.State != Queued {
			notes = append(notes, termtext.Printable(t.Why))
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, "%s: %s\n", t.Name, strings.Join(notes, "; "))
		}
	}
	counts := map[State]int{}
	attempts := 0
	for _, t := range r.Tasks {
		counts[t.State]++
		attempts += len(t.Attempts)
	}
	took := ""
	if !r.EndedAt.IsZero() {
		took = " in " + dur(r.EndedAt.Sub(r.StartedAt))
	}
	fmt.Fprintf(&b, "dispatch %s %s%s: %s of %s; %s; exit %d\n", r.ID, r.State, took, countList(counts),
		plural(len(r.Tasks), "task"), plural(attempts, "attempt"), ExitCode(r))
	return b.String()
}
