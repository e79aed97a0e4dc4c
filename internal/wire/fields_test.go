package wire

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// TestFieldsRoundTrip: what Fields appends, FieldReader takes back, in order.
func TestFieldsRoundTrip(t *testing.T) {
	var f Fields
	f.Uint(math.MaxUint64)
	f.Int(math.MinInt64)
	f.Bool(true)
	f.String("é\x00x")
	f.Bytes([]byte{0, 1})
	f.Strings([]string{"a", "", "c"})
	f.Strings(nil)
	r := NewFieldReader(f.B)
	if u := r.Uint(); u != math.MaxUint64 {
		t.Errorf("uint %d", u)
	}
	if i := r.Int(); i != math.MinInt64 {
		t.Errorf("int %d", i)
	}
	if !r.Bool() {
		t.Error("bool")
	}
	if s := r.String(); s != "é\x00x" {
		t.Errorf("string %q", s)
	}
	if b := r.Bytes(); !slices.Equal(b, []byte{0, 1}) {
		t.Errorf("bytes %v", b)
	}
	if ss := r.Strings(); !slices.Equal(ss, []string{"a", "", "c"}) {
		t.Errorf("strings %q", ss)
	}
	if ss := r.Strings(); ss != nil {
		t.Errorf("empty strings %q", ss)
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
}

// TestFieldReaderRefuses: a field cut short, a boolean not 0 or 1, a count
// the bytes left cannot hold, bytes after the last field: each an error,
// and every field after it zero.
func TestFieldReaderRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		b    []byte
		read func(r *FieldReader)
	}{
		"cut uint":    {[]byte{0x80}, func(r *FieldReader) { r.Uint() }},
		"bool 2":      {[]byte{2}, func(r *FieldReader) { r.Bool() }},
		"cut string":  {[]byte{3, 'a'}, func(r *FieldReader) { _ = r.String() }},
		"huge count":  {[]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 'a'}, func(r *FieldReader) { r.Strings() }},
		"left over":   {[]byte{1, 7}, func(r *FieldReader) { r.Bool() }},
		"nothing":     {nil, func(r *FieldReader) { r.Int() }},
		"cut in list": {[]byte{2, 1, 'a'}, func(r *FieldReader) { r.Strings() }},
	} {
		r := NewFieldReader(c.b)
		c.read(r)
		if err := r.Done(); !errors.Is(err, ErrFields) {
			t.Errorf("%s: %v", name, err)
		}
		if r.String() != "" || r.Uint() != 0 || r.Bool() {
			t.Errorf("%s: a field after the error is not zero", name)
		}
	}
}

// FuzzFieldReader: whatever the bytes, reading a mix of fields never
// panics and never takes more than the bytes hold.
func FuzzFieldReader(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c', 1, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewFieldReader(b)
		total := 0
		for range 8 {
			total += len(r.String()) + len(r.Strings()) + len(r.Bytes())
			r.Bool()
			r.Int()
		}
		if total > len(b) {
			t.Fatalf("took %d bytes of strings from %d", total, len(b))
		}
		_ = r.Done()
	})
}
