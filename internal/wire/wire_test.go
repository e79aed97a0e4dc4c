package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = Append(b, 1, []byte("hello"))
	b = Append(b, 7, nil)
	b = Append(b, 255, bytes.Repeat([]byte{'x'}, 300))
	r := bytes.NewReader(b)
	for _, want := range []Frame{{1, []byte("hello")}, {7, []byte{}}, {255, bytes.Repeat([]byte{'x'}, 300)}} {
		f, err := Read(r, 1<<10)
		if err != nil || f.Type != want.Type || !bytes.Equal(f.Payload, want.Payload) {
			t.Fatalf("Read = %d %q %v, want %d %q", f.Type, f.Payload, err, want.Type, want.Payload)
		}
	}
	if _, err := Read(r, 1<<10); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadRefusesAndTruncates(t *testing.T) {
	long := Append(nil, 1, make([]byte, 100))
	if _, err := Read(bytes.NewReader(long), 99); !errors.Is(err, ErrTooLong) {
		t.Fatalf("a frame over the limit: %v, want ErrTooLong", err)
	}
	// A length of 4 GiB is refused before anything is allocated for it.
	huge := []byte{1, 0xff, 0xff, 0xff, 0xff}
	if _, err := Read(bytes.NewReader(huge), 1<<20); !errors.Is(err, ErrTooLong) {
		t.Fatalf("a 4 GiB length: %v, want ErrTooLong", err)
	}
	for _, cut := range []int{1, HeaderLen - 1, HeaderLen, len(long) - 1} {
		_, err := Read(bytes.NewReader(long[:cut]), 1<<10)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

// FuzzRead holds the reader to its promises on any bytes: no panic, no
// payload over the limit, and a frame read back encodes to the bytes it
// came from.
func FuzzRead(f *testing.F) {
	f.Add(Append(nil, 1, []byte(`{"type":"start"}`)), uint32(64))
	f.Add([]byte{2, 0, 0, 0, 9, 'a'}, uint32(16))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, uint32(1<<20))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		max %= 1 << 16
		r := bytes.NewReader(b)
		for {
			before := r.Len()
			fr, err := Read(r, max)
			if err != nil {
				return
			}
			if uint32(len(fr.Payload)) > max {
				t.Fatalf("payload of %d bytes over the limit %d", len(fr.Payload), max)
			}
			used := b[len(b)-before : len(b)-r.Len()]
			if again := Append(nil, fr.Type, fr.Payload); !bytes.Equal(again, used) {
				t.Fatalf("frame %d %q encodes to %q, read from %q", fr.Type, fr.Payload, again, used)
			}
		}
	})
}
