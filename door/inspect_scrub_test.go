package door

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// maskAll is the scrubber's rule stated plainly, over the whole input at
// once: every byte inside an occurrence of a secret becomes the mask.
func maskAll(in []byte, secrets [][]byte) []byte {
	out := bytes.Clone(in)
	for _, s := range secrets {
		for i := 0; i+len(s) <= len(in); i++ {
			if bytes.Equal(in[i:i+len(s)], s) {
				for k := i; k < i+len(s); k++ {
					out[k] = maskByte
				}
			}
		}
	}
	return out
}

// chunks reads src in pieces of the given sizes, in turn.
type chunks struct {
	src   []byte
	sizes []int
	i     int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.src))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

func (c *chunks) Close() error { return nil }

func scrubAll(t testing.TB, s *scrubber, r io.ReadCloser) []byte {
	t.Helper()
	out, err := io.ReadAll(s.body(r))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestScrubBody(t *testing.T) {
	const secret = "Bearer ghp_0123456789abcdef"
	s := newScrubber([]string{secret})
	mask := strings.Repeat("*", len(secret))
	tokMask := strings.Repeat("*", len("ghp_0123456789abcdef"))
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{secret, mask},
		{"a" + secret + "b" + secret, "a" + mask + "b" + mask},
		{secret + secret, mask + mask},
		// The token alone, as a server may echo it.
		{`{"token":"ghp_0123456789abcdef"}`, `{"token":"` + tokMask + `"}`},
		// Near misses pass untouched: one byte off, cut short, another case.
		{"Bearer ghp_0123456789abcdeX", "Bearer ghp_0123456789abcdeX"},
		{"Bearer ghp_0123456789abcde", "Bearer ghp_0123456789abcde"},
		{"bearer GHP_0123456789ABCDEF", "bearer GHP_0123456789ABCDEF"},
		{"ghp_0123456789abcde ghp_0123456789abcd", "ghp_0123456789abcde ghp_0123456789abcd"},
		// Overlapping starts: "Bearer Bearer ghp_…" masks the one that is whole.
		{"Bearer " + secret, "Bearer " + mask},
		// Binary around it stays byte for byte.
		{"\x00\xff" + secret + "\x80\x00", "\x00\xff" + mask + "\x80\x00"},
	} {
		for _, sizes := range [][]int{nil, {1}, {2, 5}, {7}, {len(secret) - 1}, {len(secret)}, {64 << 10}} {
			got := scrubAll(t, s, &chunks{src: []byte(c.in), sizes: sizes})
			if string(got) != c.want {
				t.Errorf("scrub %q in reads of %v = %q, want %q", c.in, sizes, got, c.want)
			}
		}
		got := scrubAll(t, s, io.NopCloser(iotest.OneByteReader(strings.NewReader(c.in))))
		if string(got) != c.want {
			t.Errorf("scrub %q one byte at a time = %q", c.in, got)
		}
	}
}

func TestScrubBodyLarge(t *testing.T) {
	const secret = "tok-4f1c9a7e2b-very-secret"
	s := newScrubber([]string{secret})
	var in bytes.Buffer
	for i := 0; i < 20000; i++ {
		in.WriteString("0123456789 tok-4f1c9a7e2b-very-secreX ")
		if i%997 == 0 {
			in.WriteString(secret)
		}
	}
	want := maskAll(in.Bytes(), s.secrets)
	for _, sizes := range [][]int{{32 << 10}, {4093, 17}, {1, 1000, 3}} {
		got := scrubAll(t, s, &chunks{src: in.Bytes(), sizes: sizes})
		if !bytes.Equal(got, want) {
			t.Errorf("reads of %v: %d bytes out, %d masked differently", sizes, len(got), diffCount(got, want))
		}
	}
}

func diffCount(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// brokenBody returns data, then fails.
type brokenBody struct{ data []byte }

func (b *brokenBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *brokenBody) Close() error { return nil }

func TestScrubBodyBrokenOffKeepsThePrefix(t *testing.T) {
	const secret = "Bearer tok-4f1c9a7e2b"
	s := newScrubber([]string{secret})
	got, err := io.ReadAll(s.body(&brokenBody{data: []byte("ok Bearer tok-4f1")}))
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(got) != "ok " {
		t.Errorf("a body broken off inside a secret gave %q, %v: want what came before the secret's start, then the error", got, err)
	}
}

func TestScrubHeader(t *testing.T) {
	s := newScrubber([]string{"Bearer tok-4f1c9a7e2b"})
	h := http.Header{"X-Echo": {"got Bearer tok-4f1c9a7e2b!", "fine"}, http.TrailerPrefix + "T": {"tok-4f1c9a7e2b"}}
	s.header(h)
	if h.Get("X-Echo") != "got *********************!" || h["X-Echo"][1] != "fine" || h[http.TrailerPrefix+"T"][0] != "**************" {
		t.Errorf("scrubbed header %v", h)
	}
	if newScrubber(nil) != nil {
		t.Error("no values, yet a scrubber")
	}
}

func FuzzScrubBody(f *testing.F) {
	f.Add([]byte("a Bearer tok-12345678 b"), "Bearer tok-12345678", []byte{1, 2, 3})
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaa"), "aaaaaaaaaa", []byte{3})
	f.Add([]byte("abababababababab"), "abababab", []byte{5, 1})
	f.Fuzz(func(t *testing.T, in []byte, value string, sizes []byte) {
		value = strings.TrimSpace(value)
		if len(value) < minSecretLen || len(value) > 200 || len(in) > 1<<16 {
			return
		}
		s := newScrubber([]string{value})
		want := maskAll(in, s.secrets)
		ns := make([]int, len(sizes))
		for i, b := range sizes {
			ns[i] = int(b)
		}
		got := scrubAll(t, s, &chunks{src: in, sizes: ns})
		if !bytes.Equal(got, want) {
			t.Fatalf("scrub of %q (secret %q) in reads of %v:\n got %q\nwant %q", in, value, ns, got, want)
		}
	})
}
