package rung

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// UnmarshalJSON decodes a record exactly as encoding/json would decode it
// without this method. A record as postern writes it (every key as its
// field's tag, no null, no key twice) is read by hand: encoding/json's first
// decode of the type in a process builds its field tables by reflection, some
// 0.4 ms of every 'postern run', which reads the machine's record before
// anything else can start. Anything else goes to encoding/json.
func (r *Record) UnmarshalJSON(data []byte) error {
	if rec, seen, ok := decodeRecord(data); ok {
		rec.applyTo(r, seen)
		return nil
	}
	return json.Unmarshal(data, (*plainRecord)(r))
}

// plainRecord is Record without its UnmarshalJSON: encoding/json's own
// decoding of it.
type plainRecord Record

// The record's keys, as bits of what a decoded object held.
const (
	keyName = 1 << iota
	keyOS
	keyArch
	keyKernel
	keyOSVersion
	keyVersion
	keyUser
	keyMeasuredAt
	keyTookMS
	keyRungs
	keyRungsNull
)

var recordKeys = map[string]int{
	"name": keyName, "os": keyOS, "arch": keyArch, "kernel": keyKernel,
	"os_version": keyOSVersion, "postern_version": keyVersion, "user": keyUser,
	"measured_at": keyMeasuredAt, "took_ms": keyTookMS, "rungs": keyRungs,
}

// applyTo sets on r what the object held, as encoding/json does: the fields
// it named, and its rungs added to r's (a map made if r has none).
func (rec *Record) applyTo(r *Record, seen int) {
	for bit := keyName; bit <= keyUser; bit <<= 1 {
		if seen&bit != 0 {
			*r.stringField(bit) = *rec.stringField(bit)
		}
	}
	if seen&keyMeasuredAt != 0 {
		r.MeasuredAt = rec.MeasuredAt
	}
	if seen&keyTookMS != 0 {
		r.TookMS = rec.TookMS
	}
	if seen&keyRungsNull != 0 {
		r.Rungs = nil
	} else if seen&keyRungs != 0 {
		if r.Rungs == nil {
			r.Rungs = make(map[Name]Rung, len(rec.Rungs))
		}
		for k, v := range rec.Rungs {
			r.Rungs[k] = v
		}
	}
}

// stringField is the string field of key bit, one of keyName to keyUser.
func (r *Record) stringField(bit int) *string {
	switch bit {
	case keyName:
		return &r.Name
	case keyOS:
		return &r.OS
	case keyArch:
		return &r.Arch
	case keyKernel:
		return &r.Kernel
	case keyOSVersion:
		return &r.OSVersion
	case keyVersion:
		return &r.Version
	}
	return &r.User
}

// decodeRecord reads data as a record object in the shape postern writes;
// ok is false for anything else.
func decodeRecord(data []byte) (rec Record, seen int, ok bool) {
	d := jsonReader{b: data}
	if !d.byte('{') {
		return rec, 0, false
	}
	for first := true; ; first = false {
		if d.byte('}') {
			break
		}
		if !first && !d.byte(',') {
			return rec, 0, false
		}
		key, ok := d.key()
		bit := recordKeys[key]
		if !ok || bit == 0 || seen&bit != 0 {
			return rec, 0, false
		}
		seen |= bit
		switch bit {
		case keyMeasuredAt:
			tok, ok := d.stringToken()
			if !ok || rec.MeasuredAt.UnmarshalJSON(tok) != nil {
				return rec, 0, false
			}
		case keyTookMS:
			if rec.TookMS, ok = d.int64(); !ok {
				return rec, 0, false
			}
		case keyRungs:
			if d.null() {
				seen |= keyRungsNull // encoding/json sets a map to nil
				continue
			}
			if rec.Rungs, ok = d.rungs(); !ok {
				return rec, 0, false
			}
		default:
			s, ok := d.string()
			if !ok {
				return rec, 0, false
			}
			*rec.stringField(bit) = s
		}
	}
	d.space()
	return rec, seen, d.i == len(d.b)
}

// rungs reads the rungs' object: each rung an object of its three strings.
func (d *jsonReader) rungs() (map[Name]Rung, bool) {
	if !d.byte('{') {
		return nil, false
	}
	out := map[Name]Rung{}
	for first := true; ; first = false {
		if d.byte('}') {
			return out, true
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		name, ok := d.key()
		if !ok || !d.byte('{') {
			return nil, false
		}
		if _, dup := out[Name(name)]; dup {
			return nil, false
		}
		var g Rung
		seen := 0
		for first := true; ; first = false {
			if d.byte('}') {
				break
			}
			if !first && !d.byte(',') {
				return nil, false
			}
			k, ok := d.key()
			if !ok {
				return nil, false
			}
			v, ok := d.string()
			if !ok {
				return nil, false
			}
			var bit int
			switch k {
			case "result":
				bit, g.Result = 1, Result(v)
			case "detail":
				bit, g.Detail = 2, v
			case "remedy":
				bit, g.Remedy = 4, v
			}
			if bit == 0 || seen&bit != 0 {
				return nil, false
			}
			seen |= bit
		}
		out[Name(name)] = g
	}
}

// jsonReader reads the few JSON forms a record holds, refusing what it does
// not know.
type jsonReader struct {
	b []byte
	i int
}

func (d *jsonReader) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c, after any space, if it is next.
func (d *jsonReader) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// null consumes the literal null, after any space, if it is next.
func (d *jsonReader) null() bool {
	d.space()
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// key reads a string and the colon after it.
func (d *jsonReader) key() (string, bool) {
	s, ok := d.string()
	return s, ok && d.byte(':')
}

// stringToken reads a string, returning it with its quotes as it stands.
func (d *jsonReader) stringToken() ([]byte, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	start := d.i
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return d.b[start:d.i], true
		case c == '\\':
			j++ // the escaped byte, whatever it is, cannot end the string
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// string reads a string's value. One with an escape, or with bytes that are
// not UTF-8 (which encoding/json replaces), is unquoted by encoding/json.
func (d *jsonReader) string() (string, bool) {
	tok, ok := d.stringToken()
	if !ok {
		return "", false
	}
	inner := tok[1 : len(tok)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return "", false
	}
	return s, true
}

// int64 reads an integer as JSON writes one: an optional minus, then 0 or
// digits not starting with 0.
func (d *jsonReader) int64() (int64, bool) {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.i - digits
	if n == 0 || (n > 1 && d.b[digits] == '0') {
		return 0, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, false // a number encoding/json may refuse for an int64
		}
	}
	v, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64)
	return v, err == nil
}

var _ json.Unmarshaler = (*Record)(nil)
