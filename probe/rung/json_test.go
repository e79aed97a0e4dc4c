package rung

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// awkward are strings a record's fields may hold: what encoding/json escapes
// (<, >, &, U+2028), quotes and backslashes, control characters, bytes that
// are not UTF-8, and plain text.
var awkward = []string{"", "yes", "no", "6.18.44-fc-v1098", `a "quoted" \ path`, "<tag> & more", "line\nbreak\ttab",
	"\u2028\u2029", "é ü 漢字 🙂", "\xff\xfe bad", "\x00\x01", "podman 4.3.1 (runtime runc): 192.0.2.1:443 reached the door (970 ms)"}

func randomRecord(rng *rand.Rand) Record {
	pick := func() string { return awkward[rng.IntN(len(awkward))] }
	r := Record{Name: pick(), OS: pick(), Arch: pick(), Kernel: pick(), OSVersion: pick(), Version: pick(), User: pick(),
		MeasuredAt: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(time.FixedZone("", 60*(rng.IntN(1440)-720))),
		TookMS:     rng.Int64N(1e6) - 10}
	if rng.IntN(5) > 0 {
		r.Rungs = map[Name]Rung{}
		for range rng.IntN(10) {
			r.Rungs[Name(pick())] = Rung{Result: Result(pick()), Detail: pick(), Remedy: pick()}
		}
	}
	return r
}

// A record postern wrote reads back by hand, as encoding/json reads it.
func TestRecordJSONAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		want := randomRecord(rng)
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if data, err = json.MarshalIndent(want, "", "  "); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, ok := decodeRecord(data); !ok {
			t.Fatalf("a record as written was not read by hand:\n%s", data)
		}
		var got Record
		var ref plainRecord
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, Record(ref)) {
			t.Fatalf("read by hand %#v\nencoding/json %#v\nfrom %s", got, Record(ref), data)
		}
	}
}

// What is not a record as postern writes it is encoding/json's to read, onto
// what the value held already, as encoding/json would.
func TestRecordJSONOddShapes(t *testing.T) {
	base := `{"name":"m","took_ms":5,"rungs":{"netns":{"result":"yes","detail":"d","remedy":""}}}`
	for _, data := range []string{
		base,
		`{"NAME":"upper-case key","rungs":null}`,
		`{"name":"m","name":"twice"}`,
		`{"took_ms":1.0}`,
		`{"took_ms":1e3}`,
		`{"took_ms":"5"}`,
		`{"measured_at":null,"kernel":null}`,
		`{"rungs":{"a":{"result":"yes","extra":1}}}`,
		`{"unknown":[1,{"x":null}],"name":"n"}`,
		`{"name":"n"} `,
		`{"name":"\u00e9\ud83d\ude42"}`,
		`{"rungs":{}}`,
		`{"rungs":null}`,
		`{"rungs":{"a":null}}`,
		`{}`,
	} {
		prior := Record{Name: "prior", Rungs: map[Name]Rung{"old": {Result: Yes}}}
		got, ref := prior, plainRecord(prior)
		got.Rungs, ref.Rungs = map[Name]Rung{"old": {Result: Yes}}, map[Name]Rung{"old": {Result: Yes}}
		gerr := json.Unmarshal([]byte(data), &got)
		rerr := json.Unmarshal([]byte(data), &ref)
		if (gerr == nil) != (rerr == nil) || !reflect.DeepEqual(got, Record(ref)) {
			t.Errorf("%s:\n by hand %#v (%v)\n encoding/json %#v (%v)", data, got, gerr, Record(ref), rerr)
		}
	}
}

func FuzzRecordJSON(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		data, _ := json.Marshal(randomRecord(rng))
		f.Add(data)
	}
	f.Add([]byte(`{"name":"a","rungs":{"x":{"result":"\u0079es"}}}`))
	f.Add([]byte(`{"took_ms":-0,"measured_at":"2026-12-03T07:08:33.05894323Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Record
		var ref plainRecord
		gerr := json.Unmarshal(data, &got)
		rerr := json.Unmarshal(data, &ref)
		if (gerr == nil) != (rerr == nil) {
			t.Fatalf("%q: by hand err %v, encoding/json err %v", data, gerr, rerr)
		}
		if gerr == nil && !reflect.DeepEqual(got, Record(ref)) {
			t.Fatalf("%q:\n by hand %#v\n encoding/json %#v", data, got, Record(ref))
		}
		// Called directly, on whatever bytes, it agrees too.
		var direct Record
		derr := direct.UnmarshalJSON(data)
		if (derr == nil) != (rerr == nil) || derr == nil && !reflect.DeepEqual(direct, Record(ref)) {
			t.Fatalf("%q: called directly %#v (%v), encoding/json %#v (%v)", data, direct, derr, Record(ref), rerr)
		}
	})
}
