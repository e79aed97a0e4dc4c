package records

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// referenceRunJSON is Run's encoding written the way encoding/json would
// write it by itself, which appendRunJSON must match byte for byte.
func referenceRunJSON(r Run) ([]byte, error) {
	type plain Run
	var ended *time.Time
	if !r.EndedAt.IsZero() {
		t := r.EndedAt
		ended = &t
	}
	p := plain(r)
	if p.Command == nil {
		p.Command = []string{}
	}
	if p.Guarded == nil {
		p.Guarded = []string{}
	}
	if p.Writes == nil {
		p.Writes = []string{}
	}
	return json.Marshal(struct {
		plain
		EndedAt *time.Time `json:"ended_at"`
	}{p, ended})
}

// awkward are strings a stranger's command line, directory or policy may
// hold: every escape encoding/json makes, and bytes that are not UTF-8.
var awkward = []string{
	"", "plain", `quo"te`, `back\slash`, "<script>&amp;</script>", "\b\f\n\r\t\x00\x01\x1f\x7f",
	"é ü 日本 🙂", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "end\\", "\"",
	"/home/someone/work dir/it's", "--egress-open=\"reason\"",
}

// fill sets every field of the value v points at, recursively, from rnd:
// a field added to Run is filled too, so an encoder that forgets it fails.
func fill(v reflect.Value, rnd *rand.Rand, str func() string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(str())
	case reflect.Bool:
		v.SetBool(rnd.IntN(2) == 1)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(rnd.Int64N(1e12))
			return
		}
		v.SetInt(rnd.Int64N(1<<40) - 1<<39)
	case reflect.Uint64, reflect.Uint, reflect.Uint32:
		v.SetUint(rnd.Uint64() >> rnd.IntN(64))
	case reflect.Slice:
		switch rnd.IntN(4) {
		case 0: // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + rnd.IntN(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				fill(s.Index(i), rnd, str)
			}
			v.Set(s)
		}
	case reflect.Pointer:
		if rnd.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), rnd, str)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if rnd.IntN(4) > 0 {
				zone := time.FixedZone("", (rnd.IntN(29)-14)*3600+rnd.IntN(2)*1800)
				if rnd.IntN(2) == 0 {
					zone = time.UTC
				}
				v.Set(reflect.ValueOf(time.Unix(rnd.Int64N(4e9), rnd.Int64N(1e9)).In(zone)))
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), rnd, str)
			}
		}
	default:
		panic("fill: no filler for " + v.Type().String())
	}
}

func TestRunJSONAsEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		if rnd.IntN(3) == 0 {
			return awkward[rnd.IntN(len(awkward))] + awkward[rnd.IntN(len(awkward))]
		}
		b := make([]byte, rnd.IntN(12))
		for i := range b {
			b[i] = byte(rnd.IntN(256))
		}
		return string(b)
	}
	for i := range 3000 {
		var r Run
		fill(reflect.ValueOf(&r).Elem(), rnd, str)
		if i == 0 {
			r = Run{} // the zero run too
		}
		want, werr := referenceRunJSON(r)
		got, gerr := json.Marshal(r)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("run %d: error %v, encoding/json's %v", i, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("run %d:\n got %s\nwant %s", i, got, want)
		}
		// As written, before encoding/json's check of a MarshalJSON's
		// output (which would escape what the encoder left).
		direct, derr := appendRunJSON(nil, &r)
		if (derr != nil) != (werr != nil) || !bytes.Equal(direct, want) {
			t.Fatalf("run %d, as written:\n got %s (%v)\nwant %s (%v)", i, direct, derr, want, werr)
		}
		if werr == nil {
			var back Run
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("run %d: read back: %v", i, err)
			}
		}
	}
}

// A time encoding/json refuses is refused, not written.
func TestRunJSONRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, r := range []Run{
		{StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{EndedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{StartedAt: time.Now().In(time.FixedZone("", 25*3600))},
	} {
		if _, err := referenceRunJSON(r); err == nil {
			t.Fatalf("reference took %v", r.StartedAt)
		}
		if b, err := json.Marshal(r); err == nil {
			t.Errorf("wrote %s", b)
		}
	}
}

func FuzzRunJSON(f *testing.F) {
	for _, s := range awkward {
		f.Add(s, s, int64(0), uint64(0))
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64, u uint64) {
		code := int(n)
		r := Run{ID: a, Command: []string{a, b}, Dir: b, PolicyText: a + b, Why: b, ExitCode: &code, PidStart: u,
			Seal: &Seal{Guardrail: a, Why: b}, EnvNames: []string{b}, StartedAt: time.Unix(n%4e9, 0).UTC(), Allowed: int(n)}
		want, werr := referenceRunJSON(r)
		got, gerr := appendRunJSON(nil, &r)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("got %s (%v)\nwant %s (%v)", got, gerr, want, werr)
		}
	})
}
