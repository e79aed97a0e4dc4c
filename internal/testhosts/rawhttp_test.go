package testhosts

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http/httputil"
	"strings"
	"testing"
)

func TestBodyIsDeterministicAndPrefixStable(t *testing.T) {
	a, b := Body(100000, 7), Body(100000, 7)
	if !bytes.Equal(a, b) {
		t.Fatal("Body(n, seed) differs between calls")
	}
	if !bytes.Equal(Body(1234, 7), a[:1234]) {
		t.Fatal("Body(m, seed) is not a prefix of Body(n, seed)")
	}
	if bytes.Equal(Body(64, 8), a[:64]) {
		t.Fatal("seeds 7 and 8 give the same bytes")
	}
	streamed, err := io.ReadAll(BodyReader(100000, 7))
	if err != nil || !bytes.Equal(streamed, a) {
		t.Fatalf("BodyReader differs from Body (%v)", err)
	}
	if BodySHA256(100000, 7) != sha256Hex(a) || BodySHA256(0, 7) != sha256Hex(nil) {
		t.Fatal("BodySHA256 is not the SHA-256 of Body")
	}
}

func TestChooseCutsCutsTheHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		head := int64(20 + rng.IntN(200))
		total := head + rng.Int64N(1<<20)
		k := 3 + rng.IntN(20)
		cuts := chooseCuts(rng, head, total, k)
		if len(cuts) == 0 || len(cuts) > k-1 {
			t.Fatalf("k=%d: %d cuts", k, len(cuts))
		}
		var inHead, atEnd bool
		for j, c := range cuts {
			if c <= 0 || c >= total || (j > 0 && c <= cuts[j-1]) {
				t.Fatalf("cuts %v of %d not increasing inside (0, total)", cuts, total)
			}
			inHead = inHead || c < head
			atEnd = atEnd || (c >= head-3 && c <= head+3)
		}
		if !inHead || !atEnd {
			t.Fatalf("cuts %v for head %d: inside head %v, next to its end %v", cuts, head, inHead, atEnd)
		}
	}
	if cuts := chooseCuts(rng, 10, 100, 1); cuts != nil {
		t.Fatalf("k=1 cut at %v", cuts)
	}
}

// writeRecorder keeps each Write separately.
type writeRecorder struct{ writes [][]byte }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func TestWriteCutWritesEachPieceSeparately(t *testing.T) {
	src := Body(1000, 3)
	var w writeRecorder
	pauses := 0
	if err := writeCut(&w, bytes.NewReader(src), 1000, []int64{1, 2, 500, 999}, func() { pauses++ }); err != nil {
		t.Fatal(err)
	}
	var lens []int
	for _, b := range w.writes {
		lens = append(lens, len(b))
	}
	if got := bytes.Join(w.writes, nil); !bytes.Equal(got, src) || len(lens) != 5 || lens[0] != 1 || lens[1] != 1 || lens[2] != 498 || lens[4] != 1 || pauses != 4 {
		t.Fatalf("writes %v, pauses %d", lens, pauses)
	}
}

func TestChunkedFramesTheBody(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		n := int64(seed * 7919)
		rng := rand.New(rand.NewPCG(seed, 9))
		r, total := chunked(rng, BodyReader(n, seed), n, "SUM")
		wire, err := io.ReadAll(r)
		if err != nil || int64(len(wire)) != total {
			t.Fatalf("seed %d: %d bytes framed, said %d (%v)", seed, len(wire), total, err)
		}
		body, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(wire)))
		if err != nil || !bytes.Equal(body, Body(n, seed)) {
			t.Fatalf("seed %d: dechunked %d bytes, want %d (%v)", seed, len(body), n, err)
		}
		if !strings.HasSuffix(string(wire), "0\r\nX-Trailer-SHA256: SUM\r\n\r\n") {
			t.Fatalf("seed %d: no trailer at the end: %q", seed, wire[max(0, len(wire)-60):])
		}
		for _, mark := range []string{";a=1", `;name="quoted; value"`, "\r\n00"} {
			if bytes.Contains(wire, []byte(mark)) {
				seen[mark] = true
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("over 40 bodies the framing used only %v", seen)
	}
}

func TestParseRawTarget(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   string // RawQuery.Path() of the result, or the error's text
	}{
		{"/bytes/13", "/bytes/13?frame=cl&seed=0"},
		{"/bytes/0?seed=5&frame=chunked&split=3&trickle=1&cut=0&hints=2&ver=1.0", "/bytes/0?frame=chunked&hints=2&seed=5&split=3&trickle=1&ver=1.0"},
		{"/bytes/7?trickle=1", "/bytes/7?frame=cl&seed=0&split=16&trickle=1"},
		{"/upload?frame=close", "/bytes/0?frame=close&seed=0"},
		{"/bytes/-1", "must be a number"},
		{"/bytes/x", "must be a number"},
		{"/nope", "use /bytes/"},
		{"/bytes/1?frame=gzip", "use cl, chunked or close"},
		{"/bytes/1?ver=2", "use 1.0 or 1.1"},
		{"/bytes/1?split=-2", "must be a number"},
		{"/bytes/1?trickle=yes", "use 1 or 0"},
	} {
		p, err := parseRawTarget(tc.target)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = p.RawQuery.Path()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("parseRawTarget(%q) = %q, want %q", tc.target, got, tc.want)
		}
	}
	if p, err := parseRawTarget("/bytes/9?cut=0"); err != nil || p.cut != 0 {
		t.Fatalf("cut=0 parsed as %d (%v), want 0", p.cut, err)
	}
	if p, err := parseRawTarget("/bytes/9"); err != nil || p.cut != -1 {
		t.Fatalf("no cut parsed as %d (%v), want -1", p.cut, err)
	}
}

// RawQuery.Path and parseRawTarget agree, and no target makes the parser
// panic.
func FuzzParseRawTarget(f *testing.F) {
	f.Add("/bytes/13?seed=1&frame=chunked&split=4&trickle=1&cut=3&hints=1&ver=1.1")
	f.Add("/upload?frame=close")
	f.Add("/bytes/%zz")
	f.Fuzz(func(t *testing.T, target string) {
		p, err := parseRawTarget(target)
		if err != nil {
			return
		}
		if p.upload {
			return
		}
		q := p.RawQuery
		again, err := parseRawTarget(q.Path())
		if err != nil || again.RawQuery != q {
			t.Fatalf("%q -> %+v -> %q -> %+v (%v)", target, q, q.Path(), again.RawQuery, err)
		}
	})
}
