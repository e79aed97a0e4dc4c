package gateway

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// Record is one event as the API gives it: the door's event and its place
// in the gateway's order.
type Record struct {
	Seq uint64 `json:"seq"`
	event.Event
}

// ring is a bounded list of a client's latest events, oldest first.
type ring struct {
	buf   []Record
	start int // index of the oldest when full
}

func (r *ring) add(rec Record, size int) {
	if len(r.buf) < size {
		r.buf = append(r.buf, rec)
		return
	}
	r.buf[r.start] = rec
	r.start = (r.start + 1) % len(r.buf)
}

// each calls f for every record, oldest first.
func (r *ring) each(f func(*Record)) {
	for i := range r.buf {
		f(&r.buf[(r.start+i)%len(r.buf)])
	}
}

// Filter selects events; zero values select everything.
type Filter struct {
	Client   string         // only this client's
	Decision event.Decision // only decisions with that verdict
	AfterSeq uint64         // only events after this one
	Since    time.Time      // only events at or after this time
}

func (f Filter) match(r *Record) bool {
	if f.Client != "" && r.Client != f.Client {
		return false
	}
	if f.Decision != "" && (r.Event.Event != event.Decided || r.Decision != f.Decision) {
		return false
	}
	if r.Seq <= f.AfterSeq {
		return false
	}
	return f.Since.IsZero() || !r.Time.Before(f.Since)
}

// eventStore keeps every client's latest events in a ring of its own, and
// the events of no known client (refused credentials) in one shared ring, so
// that names nobody registered cannot make rings. It hands new events to
// followers.
type eventStore struct {
	size int

	mu     sync.Mutex
	seq    uint64
	rings  map[string]*ring
	shared ring
	subs   map[*follower]struct{}
}

// follower receives the events that match its filter as they come. When it
// falls more than its buffer behind, what does not fit is counted in lost.
type follower struct {
	f    Filter
	ch   chan Record
	lost int // under eventStore.mu
}

func newEventStore(size int) *eventStore {
	return &eventStore{size: size, rings: map[string]*ring{}, subs: map[*follower]struct{}{}}
}

// add records ev; known says whether its client is one of the gateway's.
func (s *eventStore) add(ev event.Event, known bool) Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	rec := Record{Seq: s.seq, Event: ev}
	if known {
		r := s.rings[ev.Client]
		if r == nil {
			r = &ring{}
			s.rings[ev.Client] = r
		}
		r.add(rec, s.size)
	} else {
		s.shared.add(rec, s.size)
	}
	for fl := range s.subs {
		if !fl.f.match(&rec) {
			continue
		}
		select {
		case fl.ch <- rec:
		default:
			fl.lost++
		}
	}
	return rec
}

// forget drops a removed client's ring.
func (s *eventStore) forget(client string) {
	s.mu.Lock()
	delete(s.rings, client)
	s.mu.Unlock()
}

// query returns the stored events f selects, oldest first.
func (s *eventStore) query(f Filter) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queryLocked(f)
}

func (s *eventStore) queryLocked(f Filter) []Record {
	var out []Record
	keep := func(r *Record) {
		if f.match(r) {
			out = append(out, *r)
		}
	}
	if f.Client != "" {
		if r := s.rings[f.Client]; r != nil {
			r.each(keep)
		}
	} else {
		for _, r := range s.rings {
			r.each(keep)
		}
	}
	s.shared.each(keep)
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// follow returns the stored events f selects and a follower that gets
// every later one, with no gap between them. stop ends it.
func (s *eventStore) follow(f Filter, buffer int) (past []Record, fl *follower, stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	past = s.queryLocked(f)
	fl = &follower{f: f, ch: make(chan Record, buffer)}
	s.subs[fl] = struct{}{}
	return past, fl, func() {
		s.mu.Lock()
		delete(s.subs, fl)
		s.mu.Unlock()
	}
}

// takeLost returns and clears how many events fl missed.
func (s *eventStore) takeLost(fl *follower) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := fl.lost
	fl.lost = 0
	return n
}
