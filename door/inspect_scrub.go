package door

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// minSecretLen is the shortest value inject_header may carry: a shorter one
// could not be removed from responses without rewriting ordinary bytes.
const minSecretLen = 8

// maskByte replaces every byte of an injected value an upstream echoes back.
// The mask is as long as the value, so a body keeps its length (and its
// Content-Length and byte ranges stay true).
const maskByte = '*'

// scrubber removes injected values from what an upstream sends back: every
// byte that is part of an occurrence of any value is masked, whatever the
// occurrences overlap, and nothing else changes.
type scrubber struct {
	secrets [][]byte
	maxLen  int
	first   [256]bool // the first bytes of the secrets
}

// newScrubber holds each value, and each of its space-separated parts at
// least minSecretLen long (the token of "Bearer TOKEN", which a server may
// echo alone). It returns nil for no values.
func newScrubber(values []string) *scrubber {
	var all []string
	for _, v := range values {
		all = append(all, v)
		for _, part := range strings.Fields(v) {
			if len(part) >= minSecretLen {
				all = append(all, part)
			}
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) == 0 {
		return nil
	}
	s := &scrubber{}
	for _, v := range all {
		s.secrets = append(s.secrets, []byte(v))
		s.maxLen = max(s.maxLen, len(v))
		s.first[v[0]] = true
	}
	return s
}

// header masks the values in h (trailers included, under their own names or
// http.TrailerPrefix).
func (s *scrubber) header(h http.Header) {
	for _, vs := range h {
		for i, v := range vs {
			if s.containsAny(v) {
				b := []byte(v)
				s.mask(b, s.cover(b))
				vs[i] = string(b)
			}
		}
	}
}

func (s *scrubber) containsAny(v string) bool {
	for _, sec := range s.secrets {
		if strings.Contains(v, string(sec)) {
			return true
		}
	}
	return false
}

// cover returns, for b, which bytes are part of an occurrence of a secret
// found entirely inside b; nil when none is.
func (s *scrubber) cover(b []byte) []bool {
	var marks []bool
	for _, sec := range s.secrets {
		for from := 0; from+len(sec) <= len(b); {
			i := bytes.Index(b[from:], sec)
			if i < 0 {
				break
			}
			if marks == nil {
				marks = make([]bool, len(b))
			}
			start := from + i
			for k := start; k < start+len(sec); k++ {
				marks[k] = true
			}
			from = start + 1 // occurrences may overlap
		}
	}
	return marks
}

func (s *scrubber) mask(b []byte, marks []bool) {
	for i, m := range marks {
		if m {
			b[i] = maskByte
		}
	}
}

// held is how many bytes at the end of b may be the start of a secret that
// more bytes would complete: the longest proper prefix of a secret that b
// ends with.
func (s *scrubber) held(b []byte) int {
	for n := min(s.maxLen-1, len(b)); n > 0; n-- {
		tail := b[len(b)-n:]
		if !s.first[tail[0]] {
			continue
		}
		for _, sec := range s.secrets {
			if len(sec) > n && bytes.HasPrefix(sec, tail) {
				return n
			}
		}
	}
	return 0
}

// body wraps an upstream response body so that what the client reads has
// every secret masked. Bytes that may begin a secret are held until the
// bytes after them show whether they do; at the body's end they go out as
// they are (they are not a whole secret). A body that breaks off loses what
// was held: it is a prefix of a secret, and the client's copy is cut short
// anyway.
func (s *scrubber) body(rc io.ReadCloser) io.ReadCloser {
	return &scrubBody{rc: rc, s: s}
}

type scrubBody struct {
	rc io.ReadCloser
	s  *scrubber

	// mu is held by Read, so that Close (which first closes rc, to end a
	// read in flight) gives the buffer back only once no read uses it.
	mu sync.Mutex

	// raw holds what was read from upstream and not yet returned:
	// raw[:final] is settled and masked (raw[sent:final] still to return),
	// raw[final:] is held, as it came.
	raw         []byte
	marks       []bool // per byte of raw: part of a secret (nil: none is)
	sent, final int
	err         error // the upstream's end, once reached
}

// errBodyAfterClose is a read of a response body after Close.
var errBodyAfterClose = errors.New("read of a response body after close")

// scrubBufSize is a body's first buffer; most responses fit one.
const scrubBufSize = 32 << 10

var scrubBufs = sync.Pool{New: func() any { b := make([]byte, 0, scrubBufSize); return &b }}

// release gives the buffer back once nothing more will be read from it.
func (b *scrubBody) release() {
	if b.raw != nil && cap(b.raw) == scrubBufSize {
		r := b.raw[:0]
		scrubBufs.Put(&r)
	}
	b.raw, b.marks = nil, nil
	b.sent, b.final = 0, 0
}

func (b *scrubBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.sent < b.final {
			n := copy(p, b.raw[b.sent:b.final])
			b.sent += n
			return n, nil
		}
		if b.err != nil {
			b.release()
			return 0, b.err
		}
		if b.raw == nil {
			b.raw = *scrubBufs.Get().(*[]byte)
		}
		// What went out leaves; what is held moves to the front.
		rest := copy(b.raw, b.raw[b.final:])
		b.raw = b.raw[:rest]
		if b.marks != nil {
			copy(b.marks, b.marks[b.final:])
			b.marks = b.marks[:rest]
		}
		b.sent, b.final = 0, 0
		if cap(b.raw)-len(b.raw) < 4<<10 {
			b.raw = slices.Grow(b.raw, max(scrubBufSize, len(b.raw)))
		}
		n, err := b.rc.Read(b.raw[len(b.raw):cap(b.raw)])
		b.raw = b.raw[:len(b.raw)+n]
		if b.marks != nil {
			b.marks = append(b.marks, make([]bool, n)...)
		}
		b.err = err
		b.settle()
	}
}

// settle masks the secrets raw now holds whole and decides how much of raw
// no later byte can change.
func (b *scrubBody) settle() {
	if marks := b.s.cover(b.raw); marks != nil {
		if b.marks == nil {
			b.marks = marks
		} else {
			for i, m := range marks {
				b.marks[i] = b.marks[i] || m
			}
		}
	}
	final := len(b.raw)
	if !errors.Is(b.err, io.EOF) {
		final -= b.s.held(b.raw)
	}
	if b.err != nil && !errors.Is(b.err, io.EOF) {
		// A body that broke off loses what was held with it.
		b.raw = b.raw[:final]
		if b.marks != nil {
			b.marks = b.marks[:final]
		}
	}
	if b.marks != nil {
		b.s.mask(b.raw[:final], b.marks[:final])
		if !slices.Contains(b.marks[final:], true) {
			b.marks = nil
		}
	}
	b.final = final
}

func (b *scrubBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = errBodyAfterClose
	}
	b.release()
	return err
}
