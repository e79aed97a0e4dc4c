package fleet

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"time"
)

// Live draws a dispatch on a terminal: the frame (Frame) redrawn in place on
// every change and every second, and above it, where they stay, whole, the
// lines a person must be able to read in full as they happen: denials
// (prefixed by the task's name), refusals, machines lost. Its Changed is a
// Config.OnChange.
type Live struct {
	w     io.Writer
	size  func() (width, height int)
	clock Clock

	mu     sync.Mutex
	rec    *Record
	drawn  int // lines of the frame now on the screen, above the cursor
	closed bool
	timer  Timer
}

// liveTick is how often the running durations move on.
const liveTick = time.Second

// NewLive draws on w, a terminal of the size size returns (read at every
// frame, so a resized window is followed). clock nil is the real one.
func NewLive(w io.Writer, size func() (width, height int), clock Clock) *Live {
	if clock == nil {
		clock = realClock{}
	}
	l := &Live{w: w, size: size, clock: clock}
	l.timer = clock.AfterFunc(liveTick, l.tick)
	return l
}

// Changed takes a change and the record after it.
func (l *Live) Changed(c Change, r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.rec = r
	var above []string
	if c.Event == EventDenial || c.Event == EventMachine || c.State == Refused {
		above = []string{AboveLine(c)}
	}
	l.draw(above)
}

func (l *Live) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.rec != nil {
		l.draw(nil)
	}
	l.timer = l.clock.AfterFunc(liveTick, l.tick)
}

// draw replaces the frame on the screen, printing lines above it first.
func (l *Live) draw(above []string) {
	width, height := l.size()
	var b bytes.Buffer
	if l.drawn > 0 {
		// To the start of the frame's first line, and clear from there.
		b.WriteString("\r\x1b[" + strconv.Itoa(l.drawn) + "A\x1b[J")
	}
	for _, s := range above {
		// Whole, not clipped: a denial says what to allow, and it stays.
		b.WriteString(s)
		b.WriteString("\r\n")
	}
	lines := []string(nil)
	if l.rec != nil {
		lines = Frame(l.rec, l.clock.Now(), width, height)
	}
	for _, s := range lines {
		b.WriteString(s)
		b.WriteString("\r\n")
	}
	l.drawn = len(lines)
	_, _ = l.w.Write(b.Bytes())
}

// Close draws the last frame, which stays on the screen, and stops the
// redraws. It is safe to call more than once.
func (l *Live) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.rec != nil {
		l.draw(nil)
	}
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
}
