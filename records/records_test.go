package records

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state", "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("POSTERN_HOME", "/x/home")
	if p, _ := DefaultPath(); p != "/x/home/records.db" {
		t.Fatalf("POSTERN_HOME: %s", p)
	}
	t.Setenv("POSTERN_HOME", "")
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if p, _ := DefaultPath(); p != "/x/state/postern/records.db" {
		t.Fatalf("XDG_STATE_HOME: %s", p)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/x/h")
	if p, _ := DefaultPath(); p != "/x/h/.local/state/postern/records.db" {
		t.Fatalf("HOME: %s", p)
	}
}

func TestMachinesAndRecords(t *testing.T) {
	s := openTemp(t)
	ms, err := s.Machines()
	if err != nil || len(ms) != 1 || ms[0].Name != machine.Local {
		t.Fatalf("fresh store machines = %+v, %v; want only local", ms, err)
	}
	if _, err := s.Record("local"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record of unmeasured local: %v, want ErrNotFound", err)
	}
	if err := s.PutMachine(machine.Machine{Name: "gpu1", SSH: "me@gpu1"}); err != nil {
		t.Fatal(err)
	}
	rec := &rung.Record{Name: "gpu1", MeasuredAt: time.Now().UTC(), Rungs: map[rung.Name]rung.Rung{"netns": {Result: rung.Yes, Detail: "made"}}}
	if err := s.PutRecord(rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Record("gpu1")
	if err != nil || !got.Has("netns") || got.Has("landlock") {
		t.Fatalf("record = %+v, %v", got, err)
	}
	ms, _ = s.Machines()
	if len(ms) != 2 || ms[0].Name != "local" || ms[1].Name != "gpu1" {
		t.Fatalf("machines = %+v", ms)
	}
	if err := s.RemoveMachine("gpu1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record("gpu1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record survived its machine: %v", err)
	}
	if err := s.RemoveMachine("gpu1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing twice: %v", err)
	}
}

func TestRunsByPrefix(t *testing.T) {
	s := openTemp(t)
	for i, id := range []string{"20261129-100000-aaaaaa", "20261129-100000-aaaabb", "20261129-110000-cccccc"} {
		if err := s.PutRun(&Run{ID: id, State: StateExited, StartedAt: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.Run("20261129-11"); err != nil || r.ID != "20261129-110000-cccccc" {
		t.Fatalf("unique prefix: %v %v", r, err)
	}
	if _, err := s.Run("20261129-10"); err == nil {
		t.Fatal("ambiguous prefix accepted")
	}
	if r, err := s.Run("20261129-100000-aaaaaa"); err != nil || r.ID != "20261129-100000-aaaaaa" {
		t.Fatalf("exact id that prefixes another: %v %v", r, err)
	}
	if _, err := s.Run("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing run: %v", err)
	}
	rs, err := s.Runs()
	if err != nil || len(rs) != 3 || rs[0].ID != "20261129-100000-aaaaaa" {
		t.Fatalf("runs = %v, %v", rs, err)
	}
}

func TestEventLogBatchesAndCounts(t *testing.T) {
	s := openTemp(t)
	l := s.NewEventLog("r1", EventLogOptions{})
	const n = 1500
	for i := range n {
		d := event.Allow
		if i%3 == 0 {
			d = event.Deny
		}
		l.Emit(event.Event{Event: "decision", Decision: d, Host: fmt.Sprintf("h%d.test", i), Conn: uint64(i)})
	}
	l.Emit(event.Event{Event: "end", Conn: 1, BytesUp: 5})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tl := l.Tally(); tl.Allowed != 1000 || tl.Denied != 500 || tl.Stored != n+1 || tl.Dropped != 0 || tl.Lost != 0 {
		t.Fatalf("tally = %+v", tl)
	}
	evs, next, err := s.Events("r1", 0)
	if err != nil || len(evs) != n+1 {
		t.Fatalf("events = %d, %v", len(evs), err)
	}
	for i := range n {
		if evs[i].Conn != uint64(i) {
			t.Fatalf("event %d out of order: conn %d", i, evs[i].Conn)
		}
	}
	more, _, _ := s.Events("r1", next)
	if len(more) != 0 {
		t.Fatalf("events after the last: %d", len(more))
	}
}

// A second process reads the records while this one writes events: neither
// blocks the other for longer than one transaction.
func TestReaderInAnotherProcessDoesNotStallWriter(t *testing.T) {
	if os.Getenv("RECORDS_TEST_READER") != "" {
		s := &Store{path: os.Getenv("RECORDS_TEST_READER")}
		deadline := time.Now().Add(2 * time.Second)
		reads := 0
		for time.Now().Before(deadline) {
			if _, _, err := s.Events("r1", 0); err != nil {
				fmt.Println("reader:", err)
				os.Exit(1)
			}
			reads++
		}
		fmt.Println("reads", reads)
		os.Exit(0)
	}
	s := openTemp(t)
	reader := exec.Command(os.Args[0], "-test.run=^TestReaderInAnotherProcessDoesNotStallWriter$")
	reader.Env = append(os.Environ(), "RECORDS_TEST_READER="+s.Path())
	out := make(chan []byte, 1)
	go func() { b, _ := reader.CombinedOutput(); out <- b }()
	// What a reader can cost a writer is the wait for the file: measure that,
	// apart from the fsyncs, whose time is the disk's.
	worst, writes := time.Duration(0), 0
	deadline := time.Now().Add(1500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		start := time.Now()
		release, err := s.turn(unix.LOCK_EX, lockTimeout)
		if err != nil {
			t.Fatal(err)
		}
		var f *os.File
		db, err := s.openDB(false, lockTimeout, &f)
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		_ = db.Close()
		release()
		if err := s.AppendEvents("r1", []event.Event{{Event: "decision", Decision: "allow", Conn: uint64(i)}}); err != nil {
			t.Fatal(err)
		}
		writes++
	}
	b := <-out
	if reader.ProcessState == nil || !reader.ProcessState.Success() {
		t.Fatalf("reader failed: %s", b)
	}
	t.Logf("reader: %s; %d writes, longest wait for the file while reading: %s", b, writes, worst)
	if worst > 250*time.Millisecond {
		t.Fatalf("a write waited %s for the reader", worst)
	}
}
