package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Fields appends the fields of a payload, each in the order its reader
// takes them: unsigned and signed integers as varints, booleans as one
// byte, strings and byte strings with their length first, a list with its
// count first. It has no names and no types: both ends know the layout,
// which is why it costs its reader nothing to learn.
type Fields struct {
	B []byte
}

// Uint appends u.
func (f *Fields) Uint(u uint64) { f.B = binary.AppendUvarint(f.B, u) }

// Int appends i.
func (f *Fields) Int(i int64) { f.B = binary.AppendVarint(f.B, i) }

// Bool appends b.
func (f *Fields) Bool(b bool) {
	if b {
		f.B = append(f.B, 1)
	} else {
		f.B = append(f.B, 0)
	}
}

// String appends s.
func (f *Fields) String(s string) {
	f.Uint(uint64(len(s)))
	f.B = append(f.B, s...)
}

// Bytes appends b; a nil b and an empty one read back alike, as nil.
func (f *Fields) Bytes(b []byte) {
	f.Uint(uint64(len(b)))
	f.B = append(f.B, b...)
}

// Strings appends ss; nil and empty read back alike, as nil.
func (f *Fields) Strings(ss []string) {
	f.Uint(uint64(len(ss)))
	for _, s := range ss {
		f.String(s)
	}
}

// ErrFields is a payload that does not hold the fields its reader takes.
var ErrFields = errors.New("malformed fields")

// FieldReader takes the fields Fields appended, in the same order. The
// first field that is not there (or is malformed) sets Err, after which
// every field reads as its zero value; a reader checks Err once, at the
// end, with Done. No count or length makes it allocate more than the bytes
// left could hold.
type FieldReader struct {
	b   []byte
	Err error
}

// NewFieldReader reads the fields of b.
func NewFieldReader(b []byte) *FieldReader { return &FieldReader{b: b} }

func (r *FieldReader) fail(what string) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: %s", ErrFields, what)
	}
	r.b = nil
}

// Uint takes an unsigned integer.
func (r *FieldReader) Uint() uint64 {
	if r.Err != nil {
		return 0
	}
	u, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("an unsigned integer cut short or too long")
		return 0
	}
	r.b = r.b[n:]
	return u
}

// Int takes a signed integer.
func (r *FieldReader) Int() int64 {
	if r.Err != nil {
		return 0
	}
	i, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("an integer cut short or too long")
		return 0
	}
	r.b = r.b[n:]
	return i
}

// Bool takes a boolean: 0 or 1, nothing else.
func (r *FieldReader) Bool() bool {
	if r.Err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail("a boolean that is missing or neither 0 nor 1")
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// Count takes the count of a list whose items take at least min bytes
// each; a count the bytes left cannot hold fails.
func (r *FieldReader) Count(min int) int {
	n := r.Uint()
	if r.Err != nil {
		return 0
	}
	if n > uint64(len(r.b)/max(min, 1)) {
		r.fail(fmt.Sprintf("a count of %d with %d bytes left", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *FieldReader) raw() []byte {
	n := r.Count(1)
	if r.Err != nil {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// String takes a string.
func (r *FieldReader) String() string { return string(r.raw()) }

// Bytes takes a byte string (nil when empty), a copy of the payload's.
func (r *FieldReader) Bytes() []byte {
	v := r.raw()
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

// Strings takes a list of strings (nil when empty).
func (r *FieldReader) Strings() []string {
	n := r.Count(1) // each at least its length's byte
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.String()
	}
	if r.Err != nil {
		return nil
	}
	return ss
}

// Done says whether every field was there and nothing is left after the
// last.
func (r *FieldReader) Done() error {
	if r.Err == nil && len(r.b) > 0 {
		r.fail(fmt.Sprintf("%d bytes after the last field", len(r.b)))
	}
	return r.Err
}
