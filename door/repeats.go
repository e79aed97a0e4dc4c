package door

import (
	"sync"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// repeatQuiet is how long the same decision is recorded only once: a client
// retrying, a stream of datagrams or a loop of lookups is one event a second
// (with the count of the others) rather than one per packet.
const repeatQuiet = time.Second

// repeatKeysMax bounds how many distinct decisions are remembered; beyond it,
// what was held back is recorded and the memory starts afresh.
const repeatKeysMax = 4096

// repeatKey is what makes two decisions the same for recording.
type repeatKey struct {
	kind      event.Kind
	host      string
	what      string // the DNS query type, or the wall's protocol
	port      uint16
	decision  event.Decision
	wouldDeny bool
}

type repeatEntry struct {
	last time.Time // when an event of the key was last recorded
	held int       // decisions since, not recorded
	ev   Event     // the latest of them
}

// repeats records each decision at most once per key in a quiet second. The
// count of those held back rides on the next one recorded (Event.Repeats), or
// on a summary event once the key has been quiet, or when the door stops.
type repeats struct {
	mu        sync.Mutex
	m         map[repeatKey]*repeatEntry
	lastSweep time.Time
}

func newRepeats() *repeats { return &repeats{m: make(map[repeatKey]*repeatEntry)} }

// admit returns the events to record for one decision ev made at now: ev
// itself (with Repeats set) unless the same decision was recorded less than
// a quiet second ago, and summaries of other decisions that have gone quiet.
func (r *repeats) admit(k repeatKey, ev Event, now time.Time) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	e, ok := r.m[k]
	switch {
	case ok && now.Sub(e.last) < repeatQuiet:
		ev.Time = now.UTC()
		e.held++
		e.ev = ev
	default:
		if !ok {
			if len(r.m) >= repeatKeysMax {
				out = r.flushLocked()
			}
			e = &repeatEntry{}
			r.m[k] = e
		}
		ev.Repeats = e.held
		e.last, e.held = now, 0
		out = append(out, ev)
	}
	if now.Sub(r.lastSweep) >= repeatQuiet {
		r.lastSweep = now
		for key, e := range r.m {
			if now.Sub(e.last) < repeatQuiet {
				continue
			}
			if e.held > 0 {
				out = append(out, summary(e))
			}
			delete(r.m, key)
		}
	}
	return out
}

// flush returns a summary of every decision held back, and forgets them all.
func (r *repeats) flush() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

func (r *repeats) flushLocked() []Event {
	var out []Event
	for _, e := range r.m {
		if e.held > 0 {
			out = append(out, summary(e))
		}
	}
	clear(r.m)
	return out
}

// summary is the latest held-back decision of e, standing for all of them.
func summary(e *repeatEntry) Event {
	ev := e.ev
	ev.Repeats = e.held - 1
	return ev
}
