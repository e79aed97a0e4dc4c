package records

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe/rung"
)

// populated returns the bytes of a store holding a machine, its record, runs
// and n events, enough to span pages.
func populated(t testing.TB, n int) []byte {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutMachine(machine.Machine{Name: "gpu1", SSH: "me@gpu1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecord(&rung.Record{Name: "gpu1", MeasuredAt: time.Unix(1, 0).UTC(), Rungs: map[rung.Name]rung.Rung{"netns": {Result: rung.Yes}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.PutRun(&Run{ID: fmt.Sprintf("20260101-00000%d-aaaaaa", i), State: StateExited, StartedAt: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Event: "decision", Kind: "dns", Decision: "deny", Host: fmt.Sprintf("n%d.denied.test", i), Reason: strings.Repeat("r", 80)}
	}
	if err := s.AppendEvents("20260101-000000-aaaaaa", evs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// usedSize is how many bytes a store's pages take (the file may be longer).
func usedSize(t testing.TB, b []byte) int {
	t.Helper()
	p := filepath.Join(t.TempDir(), "used.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	_ = db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	if int(n) > len(b) || n < 4*4096 {
		t.Fatalf("store pages take %d bytes of %d", n, len(b))
	}
	return int(n)
}

// everyOperation runs each of the store's operations and returns their errors.
func everyOperation(s *Store) []error {
	_, err1 := s.Machines()
	_, err2 := s.Runs()
	_, _, err3 := s.Events("20260101-000000-aaaaaa", 0)
	_, err4 := s.Record("gpu1")
	_, err5 := s.Run("20260101-000001")
	_, err6 := s.Machine("gpu1")
	return []error{err1, err2, err3, err4, err5, err6}
}

func sum(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// checkDamaged asserts err is a damage report that names the file and says
// what to do.
func checkDamaged(t *testing.T, err error, path, found string) {
	t.Helper()
	var d *DamagedError
	if !errors.As(err, &d) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("error %v (%T), want a *DamagedError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"records file " + path + " is damaged", found, "move it aside", "postern machine probe-confinement"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not say %q", msg, want)
		}
	}
}

func TestDamagedStoresAreReportedAndKept(t *testing.T) {
	good := populated(t, 2000)
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	// The meta pages as they were, everything after them noise: the library
	// finds a valid store and trips over its pages.
	pagesNoise := bytes.Clone(good)
	for i := 2 * 4096; i < len(pagesNoise); i++ {
		pagesNoise[i] = byte(rng.UintN(256))
	}
	foreign := func(t *testing.T) []byte {
		p := filepath.Join(t.TempDir(), "other.db")
		db, err := bolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("someone-else")); return err })
		db.Close()
		b, _ := os.ReadFile(p)
		return b
	}
	cases := []struct {
		name  string
		bytes func(t *testing.T) []byte
		found string // in the error
		// open: the damage shows at Open; else Open may succeed and
		// operations that read the damaged part fail.
		open bool
	}{
		{"empty", func(*testing.T) []byte { return nil }, "an empty file (0 bytes)", true},
		{"one byte", func(*testing.T) []byte { return []byte{0} }, "not a bbolt database", true},
		{"first page only", func(*testing.T) []byte { return good[:4096] }, "", true},
		{"cut to half", func(*testing.T) []byte { return good[:len(good)/2] }, "cut short", true},
		{"cut a byte short of its pages", func(*testing.T) []byte { return good[:usedSize(t, good)-1] }, "cut short", true},
		{"garbage", func(*testing.T) []byte { return garbage }, "not a bbolt database", true},
		{"text", func(*testing.T) []byte { return []byte("hello, this is not a database\n") }, "", true},
		{"meta pages zeroed", func(*testing.T) []byte {
			b := bytes.Clone(good)
			clear(b[:2*4096])
			return b
		}, "not a bbolt database", true},
		{"pages after the meta are noise", func(*testing.T) []byte { return pagesNoise }, "", false},
		{"a bbolt file that is not ours", foreign, "without postern's buckets", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "records.db")
			if err := os.WriteFile(path, tc.bytes(t), 0o600); err != nil {
				t.Fatal(err)
			}
			before := sum(t, path)
			s, err := Open(path)
			switch {
			case tc.open:
				if err == nil {
					t.Fatal("Open accepted a damaged store")
				}
				checkDamaged(t, err, path, tc.found)
				t.Logf("%v", err)
			case err != nil:
				checkDamaged(t, err, path, tc.found)
				t.Logf("%v", err)
			default:
				damaged := 0
				for _, err := range everyOperation(s) {
					if err == nil || errors.Is(err, ErrNotFound) {
						continue
					}
					checkDamaged(t, err, path, tc.found)
					t.Logf("%v", err)
					damaged++
				}
				if damaged == 0 {
					t.Fatal("no operation noticed the damage")
				}
			}
			if sum(t, path) != before {
				t.Fatal("the damaged store was changed")
			}
		})
	}
}

func TestDamagedShapes(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "records.db")
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		checkDamaged(t, err, path, "a directory")
	})
	t.Run("dangling symbolic link", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "records.db")
		if err := os.Symlink(filepath.Join(dir, "elsewhere.db"), path); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		checkDamaged(t, err, path, "a symbolic link to")
		if _, err := os.Stat(filepath.Join(dir, "elsewhere.db")); err == nil {
			t.Fatal("a store was made at the link's target")
		}
	})
	t.Run("a value that does not decode", func(t *testing.T) {
		s := openTemp(t)
		if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRuns).Put([]byte("r1"), []byte("{not json")) }); err != nil {
			t.Fatal(err)
		}
		_, err := s.Runs()
		checkDamaged(t, err, s.Path(), "runs/r1 that does not decode")
	})
	t.Run("a bucket gone", func(t *testing.T) {
		s := openTemp(t)
		if err := s.update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketEvents) }); err != nil {
			t.Fatal(err)
		}
		// A store that loses a bucket is damaged: a write is refused, not a
		// panic, and it is not made afresh at the next Open.
		err := s.AppendEvents("r1", []event.Event{{Event: "decision"}})
		checkDamaged(t, err, s.Path(), "without its events bucket")
		_, err = Open(s.Path())
		checkDamaged(t, err, s.Path(), "without its events bucket")
	})
	t.Run("an older store", func(t *testing.T) {
		// Made before agents were recorded: Open adds the bucket.
		s := openTemp(t)
		if err := s.PutRun(&Run{ID: "r1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketAgents) }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Agent("m", "h"); !errors.Is(err, ErrDamaged) {
			t.Fatalf("before Open: %v", err)
		}
		if _, err := Open(s.Path()); err != nil {
			t.Fatalf("reopening an older store: %v", err)
		}
		if _, err := s.Agent("m", "h"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after Open: %v", err)
		}
		if r, err := s.Run("r1"); err != nil || r.ID != "r1" {
			t.Fatalf("the older store's runs: %v, %v", r, err)
		}
	})
	t.Run("emptied while in use", func(t *testing.T) {
		// What a run that can reach the records could do: the store must
		// not be made afresh underneath the writer, nor panic.
		s := openTemp(t)
		l := s.NewEventLog("r1", EventLogOptions{})
		l.Emit(event.Event{Event: "decision", Decision: "allow"})
		if err := os.Truncate(s.Path(), 0); err != nil {
			t.Fatal(err)
		}
		l.Emit(event.Event{Event: "decision", Decision: "deny"})
		err := l.Close(context.Background())
		checkDamaged(t, err, s.Path(), "an empty file")
		if st, _ := os.Stat(s.Path()); st.Size() != 0 {
			t.Fatalf("the emptied store was written: %d bytes", st.Size())
		}
		if tl := l.Tally(); tl.Allowed != 1 || tl.Denied != 1 || tl.Lost == 0 {
			t.Fatalf("tally %+v: the decisions must be counted though not stored", tl)
		}
		err = s.PutRun(&Run{ID: "r1"})
		checkDamaged(t, err, s.Path(), "an empty file")
	})
	t.Run("removed while in use", func(t *testing.T) {
		s := openTemp(t)
		if err := os.Remove(s.Path()); err != nil {
			t.Fatal(err)
		}
		err := s.PutRun(&Run{ID: "r1"})
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "moved or removed") {
			t.Fatalf("write to a removed store: %v", err)
		}
		if _, err := os.Stat(s.Path()); err == nil {
			t.Fatal("a removed store was made afresh by a write")
		}
	})
}

// FuzzOpenDamaged opens stores made of damaged bytes and runs every read on
// them: whatever the bytes, the answer is data, not found, or a damage report
// naming the file; never a panic, a fault or a change to the file.
func FuzzOpenDamaged(f *testing.F) {
	good := populated(f, 100)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:3*4096])
	f.Add([]byte{})
	noisy := bytes.Clone(good)
	for i := 2 * 4096; i < len(noisy); i += 97 {
		noisy[i] ^= 0x5a
	}
	f.Add(noisy)
	dir := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, b []byte) {
		n++
		path := filepath.Join(dir, fmt.Sprintf("records-%d.db", n))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		defer os.Remove(path + ".turn")
		defer os.Remove(path + ".reserve")
		before := sha256.Sum256(b)
		s, err := Open(path)
		if err != nil {
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v", err)
			}
		} else {
			for _, err := range everyOperation(s) {
				if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDamaged) {
					t.Fatalf("operation: %v", err)
				}
			}
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Open may add a missing bucket to a store that has others; a store
		// it refused is left as it was.
		if s == nil && sha256.Sum256(after) != before {
			t.Fatal("a store Open refused was changed")
		}
	})
}
