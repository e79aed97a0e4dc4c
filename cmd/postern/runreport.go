package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/records"
)

// runReport is what postern itself says about a run on stderr: as lines for
// a person, or with --json as one JSON object per line, each with an
// "event" key: "start", "denial", "warning", "log", "end". The run's own
// stdout and stderr never pass through it.
type runReport struct {
	w     io.Writer
	json  bool
	quiet bool
	mu    sync.Mutex // one object or line at a time
}

func newRunReport(w io.Writer, jsonOut, quiet bool) *runReport {
	return &runReport{w: w, json: jsonOut, quiet: quiet}
}

// startObject is 'run --json”s first object, once the run is recorded as
// running and before its command starts.
type startObject struct {
	Event   string   `json:"event"` // "start"
	ID      string   `json:"id"`
	Machine string   `json:"machine"`
	Lane    string   `json:"lane"`
	Carry   string   `json:"carry"`
	Policy  string   `json:"policy"`
	Mode    string   `json:"mode"`
	Env     []string `json:"env"` // the names passed with --env and the machine's env
}

// endObject is 'run --json”s last object.
type endObject struct {
	Event string `json:"event"` // "end"
	ID    string `json:"id"`    // "" when nothing was recorded (bad usage, an unknown machine)
	State string `json:"state"` // the record's state; "" when nothing was recorded
	// Exit is postern's exit status; ExitCode the command's own (null when
	// it did not exit: refused, not started, lost).
	Exit     int    `json:"exit"`
	ExitCode *int   `json:"exit_code"`
	Why      string `json:"why"` // exited, signalled, refused, start-failed, not-executable, not-found, lost, usage
	// DurationMS is how long postern took from the run's dispatch to its end.
	DurationMS    int64  `json:"duration_ms"`
	Allowed       int    `json:"allowed"`
	Denials       int    `json:"denials"`
	WouldDeny     int    `json:"would_deny"`
	EventsDropped int    `json:"events_dropped"`
	Error         string `json:"error"` // postern's message when the run did not end by its command's exit
}

// denialObject is one connection the door or the wall refused (or, in
// observe mode, would have refused).
type denialObject struct {
	Event     string `json:"event"` // "denial"
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Target    string `json:"target"`
	Reason    string `json:"reason"`
	WouldDeny bool   `json:"would_deny"`
	Repeats   int    `json:"repeats"`
}

type warningObject struct {
	Event   string `json:"event"` // "warning"
	Message string `json:"message"`
}

func (r *runReport) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(append(b, '\n'))
}

func (r *runReport) line(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, format, args...)
}

// start says the run is starting.
func (r *runReport) start(run *records.Run) {
	if r.json {
		r.emit(startObject{Event: "start", ID: run.ID, Machine: run.Machine, Lane: string(run.Lane), Carry: string(run.Carry),
			Policy: run.Policy, Mode: run.Mode, Env: nonNil(run.EnvNames)})
		return
	}
	if !r.quiet {
		r.line("postern: run %s on %s (%s)\n", run.ID, run.Machine, run.Carry)
	}
}

// event says what the door refused, as it happens.
func (r *runReport) event(ev door.Event) {
	if r.quiet || ev.Event != "decision" || (ev.Decision != "deny" && !ev.WouldDeny) {
		return
	}
	if !r.json {
		r.mu.Lock()
		defer r.mu.Unlock()
		printDenial(r.w, ev)
		return
	}
	target := ev.Host
	if ev.Port != 0 {
		target = fmt.Sprintf("%s:%d", ev.Host, ev.Port)
	}
	if ev.Method != "" {
		target = ev.Method + " " + ev.Path + " on " + target
	}
	r.emit(denialObject{Event: "denial", ID: ev.Run, Kind: string(ev.Kind), Target: termtext.Printable(target),
		Reason: termtext.Printable(ev.Reason), WouldDeny: ev.WouldDeny, Repeats: ev.Repeats})
}

// warnings is where dispatch's warnings for the person go.
func (r *runReport) warnings() io.Writer {
	if !r.json {
		return reportWriter{r}
	}
	return &warningLines{r: r}
}

// logger is postern's log, warnings and above.
func (r *runReport) logger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if r.json {
		return slog.New(slog.NewJSONHandler(reportWriter{r}, opts)).With("event", "log")
	}
	return slog.New(slog.NewTextHandler(reportWriter{r}, opts))
}

// end says how the run ended.
func (r *runReport) end(run *records.Run, err error, code int, why string, took time.Duration) {
	if r.json {
		o := endObject{Event: "end", Exit: code, Why: why, DurationMS: took.Milliseconds()}
		if run != nil {
			o.ID, o.State, o.ExitCode = run.ID, string(run.State), run.ExitCode
			o.Allowed, o.Denials, o.WouldDeny, o.EventsDropped = run.Allowed, run.Denied, run.WouldDeny, run.EventsDropped
		}
		if err != nil {
			o.Error = err.Error()
		}
		r.emit(o)
		return
	}
	if run == nil {
		return
	}
	if !r.quiet && (run.Denied > 0 || run.WouldDeny > 0) {
		r.line("postern: run %s: %d allowed, %d denied, %d would be denied under enforce; see 'postern runs events %s'\n",
			run.ID, run.Allowed, run.Denied, run.WouldDeny, run.ID)
	}
	if run.EventsDropped > 0 {
		r.line("postern: run %s: %d events over the rate of %d a second were counted, not stored\n",
			run.ID, run.EventsDropped, records.DefaultEventRate)
	}
}

// reportWriter writes through the report's lock, so that lines from the
// door's goroutines and dispatch's never interleave.
type reportWriter struct{ r *runReport }

func (l reportWriter) Write(p []byte) (int, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.w.Write(p)
}

// warningLines turns each line written to it into a warning object.
type warningLines struct {
	r   *runReport
	mu  sync.Mutex
	buf []byte
}

func (w *warningLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimPrefix(strings.TrimRight(string(w.buf[:i]), "\r"), "postern: ")
		w.buf = w.buf[i+1:]
		if line != "" {
			w.r.emit(warningObject{Event: "warning", Message: line})
		}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
