package fleet

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/probe/rung"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// linuxRecord is a Linux machine's record that measured every rung of the
// remote-linux lane yes, and the extra rungs given.
func linuxRecord(name string, extra ...rung.Name) *probe.Record {
	rec := &probe.Record{Name: name, OS: "linux", Arch: "amd64", Kernel: "6.12.0", MeasuredAt: t0.Add(-time.Hour), Rungs: map[rung.Name]probe.Rung{}}
	for _, r := range append(carry.Needs(machine.LaneRemoteLinux), extra...) {
		rec.Rungs[r] = probe.Rung{Result: probe.Yes, Detail: "measured"}
	}
	return rec
}

// walled is a remote machine whose record can wall its lane.
func walled(name string, labels ...string) Machine {
	return Machine{Machine: machine.Machine{Name: name, SSH: name, Labels: labelMap(labels)}, Record: linuxRecord(name)}
}

// unmeasured is a remote machine never measured.
func unmeasured(name string, labels ...string) Machine {
	return Machine{Machine: machine.Machine{Name: name, SSH: name, Labels: labelMap(labels)}}
}

// unable is a remote machine measured without network namespaces.
func unable(name string, labels ...string) Machine {
	m := walled(name, labels...)
	m.Record.Rungs[probe.RungNetns] = probe.Rung{Result: probe.No, Detail: "unshare: operation not permitted",
		Remedy: "sysctl -w kernel.unprivileged_userns_clone=1"}
	return m
}

// withGPU is m with a record that measured gpu yes.
func withGPU(m Machine) Machine {
	m.Record.Rungs[probe.RungGPU] = probe.Rung{Result: probe.Yes, Detail: "1 GPU: GPU 0 NVIDIA A100"}
	return m
}

func labelMap(kv []string) map[string]string {
	if len(kv) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return m
}

func mustParse(t testing.TB, src string) *File {
	t.Helper()
	f, err := Parse("tasks.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fakeClock is a dispatch's time that moves only when a test moves it.
// Timers fire in Advance, in the caller's goroutine, in time order.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	seq    int
	// armed receives a value each time a timer is set, for a test that
	// must know the dispatch is waiting on one.
	armed chan time.Duration
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	seq     int
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0, armed: make(chan time.Duration, 1024)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	select {
	case c.armed <- d:
	default:
	}
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *fakeTimer) bool { return x == t })
	return was
}

// Advance moves the clock on by d, firing the timers due on the way.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		sort.Slice(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			break
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		t.stopped = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}
