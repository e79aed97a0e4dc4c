package netwall

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// filled sets every field of the value v points to, recursively, to
// something other than its zero value, except the fields named in
// skip; n makes the values differ from field to field.
func filled(v reflect.Value, n *int, skip map[string]bool) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Repeat("é", *n%3+1) + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(-*n * 1000))
	case reflect.Uint16, reflect.Uint64:
		v.SetUint(uint64(*n * 7))
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{0, byte(*n), 0xff})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			filled(s.Index(i), n, skip)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		filled(p.Elem(), n, skip)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if skip[v.Type().Name()+"."+v.Type().Field(i).Name] {
				continue
			}
			filled(v.Field(i), n, skip)
		}
	default:
		panic("filled: a " + v.Type().String() + " field: teach the test and the codec")
	}
}

// TestCodecCarriesEveryField: a message with every field set comes through
// the codec whole, so a field added to one of its types and not to the
// codec fails here. Only what travels in the init's arguments is left out.
func TestCodecCarriesEveryField(t *testing.T) {
	skip := map[string]bool{"initConfig.netPlan": true}
	var m message
	n := 0
	filled(reflect.ValueOf(&m).Elem(), &n, skip)
	got, err := decodeMessage(encodeMessage(m))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("through the codec:\n got %+v\nwant %+v", got, m)
	}
	// Zero values, pointers nil: the same.
	for _, z := range []message{{}, {Type: msgStart}, {Config: &initConfig{}}, {Ending: &Ending{}}} {
		got, err := decodeMessage(encodeMessage(z))
		if err != nil || !reflect.DeepEqual(got, z) {
			t.Errorf("%+v through the codec: %+v, %v", z, got, err)
		}
	}
}

// TestCodecRefusesWhatItDidNotWrite: a payload cut anywhere, or with bytes
// after its last field, is an error, not a message.
func TestCodecRefusesWhatItDidNotWrite(t *testing.T) {
	var m message
	n := 0
	filled(reflect.ValueOf(&m).Elem(), &n, map[string]bool{})
	b := encodeMessage(m)
	for i := range len(b) {
		if _, err := decodeMessage(b[:i]); err == nil {
			t.Fatalf("cut at %d of %d: decoded", i, len(b))
		}
	}
	if _, err := decodeMessage(append(slices.Clone(b), 0)); err == nil {
		t.Fatal("a byte after the last field: decoded")
	}
	// A count larger than what is left never allocates it.
	huge := []byte{1, 't', 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := decodeMessage(huge); err == nil {
		t.Fatal("a command list of 4G strings in 5 bytes: decoded")
	}
}

// FuzzDecodeMessage: whatever the bytes, decoding fails cleanly or gives a
// message that encodes back to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	var m message
	n := 0
	filled(reflect.ValueOf(&m).Elem(), &n, map[string]bool{"initConfig.netPlan": true})
	f.Add(encodeMessage(m))
	f.Add(encodeMessage(message{Type: msgReady, PidMaxErr: "x"}))
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		if again := encodeMessage(m); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes as %x, not %x", m, again, b)
		}
	})
}

// TestNetArgs: the init's arguments carry its network plan whole, and
// nothing else is taken for one.
func TestNetArgs(t *testing.T) {
	for _, p := range []netPlan{{Ports: []uint16{80, 443}}, {Ports: []uint16{22}, AllTCP: true}, {NoNetwork: true}, {Ports: nil}} {
		got, err := parseNetArgs(netArgs(p))
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("%+v: args %q read back as %+v, %v", p, netArgs(p), got, err)
		}
	}
	for _, bad := range [][]string{nil, {"--ports=0"}, {"--ports=65536"}, {"--ports=+80"}, {"--ports=080"}, {"--ports=80,"},
		{"--ports=80", "--ports=443"}, {"--no-network", "--ports=80"}, {"--all-tcp"}, {"--ports=80", "--all-tcp", "--all-tcp"}, {"--ports=80", "x"}} {
		if p, err := parseNetArgs(bad); err == nil {
			t.Errorf("%q read as %+v", bad, p)
		}
	}
}

// FuzzParseNetArgs: any argument parses cleanly or fails, and what parses
// is written back the same way.
func FuzzParseNetArgs(f *testing.F) {
	f.Add("--ports=80,443", "--all-tcp")
	f.Add("--no-network", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		args := []string{a}
		if b != "" {
			args = append(args, b)
		}
		p, err := parseNetArgs(args)
		if err != nil {
			return
		}
		if q, err := parseNetArgs(netArgs(p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("%q: %+v, written back and read: %+v, %v", args, p, q, err)
		}
	})
}
