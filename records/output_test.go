package records

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// What is kept of a stream is its last OutputLimit bytes, byte for byte, and
// the offset says how much was cut from its front; the streams are apart.
func TestOutputKeepsTheLastBytesOfEachStream(t *testing.T) {
	s := openTemp(t)
	var all []byte
	for _, n := range []int{10, OutputLimit / 2, OutputLimit / 2, 12345, 2*OutputLimit + 3, 7} {
		p := make([]byte, n)
		_, _ = rand.Read(p)
		all = append(all, p...)
		if err := s.AppendOutput("r1", Stdout, p); err != nil {
			t.Fatal(err)
		}
		got, off, err := s.Output("r1", Stdout)
		if err != nil {
			t.Fatal(err)
		}
		want := all
		if len(want) > OutputLimit {
			want = want[len(want)-OutputLimit:]
		}
		if !bytes.Equal(got, want) || off != uint64(len(all)-len(want)) {
			t.Fatalf("after %d bytes: kept %d bytes from offset %d, want %d from %d (equal: %v)", len(all), len(got), off, len(want), len(all)-len(want), bytes.Equal(got, want))
		}
	}
	if err := s.AppendOutput("r1", Stderr, []byte("err\n")); err != nil {
		t.Fatal(err)
	}
	if got, off, _ := s.Output("r1", Stderr); string(got) != "err\n" || off != 0 {
		t.Fatalf("stderr: %q from %d", got, off)
	}
	if got, _, _ := s.Output("r2", Stdout); got != nil {
		t.Fatalf("a run with no output kept: %q", got)
	}
	if err := s.AppendOutput("r1", "stdin", []byte("x")); err == nil {
		t.Fatal("a stream that is not stdout or stderr was kept")
	}
	if done, _ := s.OutputDone("r1"); done {
		t.Fatal("output done before FinishOutput")
	}
	if err := s.FinishOutput("r1"); err != nil {
		t.Fatal(err)
	}
	if done, _ := s.OutputDone("r1"); !done {
		t.Fatal("output not done after FinishOutput")
	}
}

func TestDispatchesByPrefix(t *testing.T) {
	s := openTemp(t)
	if ds, err := s.Dispatches(); err != nil || len(ds) != 0 {
		t.Fatalf("a new store's dispatches: %v %v", ds, err)
	}
	if _, err := s.Dispatch("2026"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a dispatch in a store with none: %v", err)
	}
	now := time.Now().UTC()
	for i, id := range []string{"20260101-000000-aaaaaa", "20260101-000000-aabbbb", "20260102-000000-cccccc"} {
		rec := json.RawMessage(`{"id":"` + id + `"}`)
		if err := s.PutDispatch(&Dispatch{ID: id, State: "running", StartedAt: now.Add(time.Duration(i) * time.Second), Record: rec}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Dispatch("20260101-000000-aa"); err == nil {
		t.Fatal("an ambiguous prefix found one dispatch")
	}
	d, err := s.Dispatch("20260102")
	if err != nil || d.ID != "20260102-000000-cccccc" || string(d.Record) != `{"id":"20260102-000000-cccccc"}` {
		t.Fatalf("by prefix: %+v %v", d, err)
	}
	ds, err := s.Dispatches()
	if err != nil || len(ds) != 3 || ds[0].ID != "20260101-000000-aaaaaa" || ds[2].ID != "20260102-000000-cccccc" {
		t.Fatalf("dispatches: %+v %v", ds, err)
	}
}
