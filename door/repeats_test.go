package door

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestRepeatsHoldBackWithinASecond(t *testing.T) {
	r := newRepeats()
	t0 := time.Unix(1000, 0)
	a := repeatKey{kind: "dns", host: "a.test", what: "A", decision: "deny"}
	aaaa := a
	aaaa.what = "AAAA"
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(conn uint64) Event {
		return Event{Event: "decision", Kind: "dns", Host: "a.test", Decision: "deny", Conn: conn}
	}

	if out := r.admit(a, ev(1), at(0)); len(out) != 1 || out[0].Repeats != 0 || out[0].Conn != 1 {
		t.Fatalf("first: %+v", out)
	}
	for i := range 9 {
		if out := r.admit(a, ev(uint64(2+i)), at(100*(i+1))); len(out) != 0 {
			t.Fatalf("repeat %d recorded: %+v", i, out)
		}
	}
	// Another query type is another decision.
	if out := r.admit(aaaa, ev(20), at(950)); len(out) != 1 || out[0].Repeats != 0 {
		t.Fatalf("AAAA: %+v", out)
	}
	// A second on: recorded, carrying the nine held back.
	if out := r.admit(a, ev(30), at(1000)); len(out) != 1 || out[0].Repeats != 9 || out[0].Conn != 30 {
		t.Fatalf("after a second: %+v", out)
	}
	if out := r.admit(a, ev(31), at(1100)); len(out) != 0 {
		t.Fatalf("held: %+v", out)
	}
	if out := r.admit(a, ev(32), at(1200)); len(out) != 0 {
		t.Fatalf("held: %+v", out)
	}
	// The key goes quiet; another decision later sweeps it into a summary
	// standing for the two held back (the latest of them, Repeats 1).
	b := repeatKey{kind: "dns", host: "b.test", what: "A", decision: "deny"}
	out := r.admit(b, Event{Host: "b.test", Conn: 40}, at(2500))
	if len(out) != 2 || out[0].Conn != 40 || out[1].Conn != 32 || out[1].Repeats != 1 || !out[1].Time.Equal(at(1200)) {
		t.Fatalf("sweep: %+v", out)
	}
	// Stopping records what is held.
	r.admit(b, Event{Host: "b.test", Conn: 41}, at(2600))
	if out := r.flush(); len(out) != 1 || out[0].Conn != 41 || out[0].Repeats != 0 {
		t.Fatalf("flush: %+v", out)
	}
	if out := r.flush(); len(out) != 0 {
		t.Fatalf("second flush: %+v", out)
	}
}

func TestRepeatsBounded(t *testing.T) {
	r := newRepeats()
	t0 := time.Unix(1000, 0)
	k := func(i int) repeatKey {
		return repeatKey{kind: "dns", host: fmt.Sprintf("n%d.test", i), decision: "deny"}
	}
	r.admit(k(0), Event{Conn: 1}, t0)
	r.admit(k(0), Event{Conn: 2}, t0) // held
	var summaries int
	for i := 1; i <= repeatKeysMax; i++ {
		for _, e := range r.admit(k(i), Event{Conn: uint64(10 + i)}, t0) {
			if e.Conn == 2 {
				summaries++
			}
		}
	}
	if summaries != 1 || len(r.m) > repeatKeysMax {
		t.Fatalf("a full memory flushed %d summaries of the held decision, holds %d keys", summaries, len(r.m))
	}
}

// A loop of lookups of a denied name is a handful of events whose repeats
// add up to every lookup answered.
func TestDNSFloodIsCounted(t *testing.T) {
	checkNoLeaks(t)
	h := newHarness(t, mustPolicy(t, testPolicy))
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	conn, err := c.Dial(h.dnsUDP)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	answered := 0
	for i := range n {
		name := "flood.other.test"
		if i%1000 == 0 {
			name = fmt.Sprintf("d%d.other.test", i) // distinct names are each recorded
		}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := c.ExchangeWithConn(m, conn)
		if err == nil && r.Rcode == dns.RcodeNameError {
			answered++
		}
	}
	conn.Close()
	h.stop()
	decisions, events, distinct := 0, 0, 0
	for _, e := range h.ev.all() {
		if e.Kind != "dns" {
			continue
		}
		decisions += 1 + e.Repeats
		if e.Host == "flood.other.test" {
			events++
		} else {
			distinct++
		}
	}
	if answered != n || decisions != n || distinct != 3 {
		t.Fatalf("%d lookups answered, events stand for %d decisions (%d of other names); want %d and 3", answered, decisions, distinct, n)
	}
	if events > 10 {
		t.Fatalf("%d events for one name looked up %d times", events, n-3)
	}
	t.Logf("%d lookups of one denied name: %d events", n-3, events)
}
