package container

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/postern-dev/postern/internal/wire"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		line string
		want message
		err  string
	}{
		{line: `{"type":"hello","version":1}`, want: message{Type: msgHello, Version: 1}},
		{line: `{"type":"start"}`, want: message{Type: msgStart}},
		{line: `{"type":"started","pid":12}`, want: message{Type: msgStarted, Pid: 12}},
		{line: `{"type":"signal","signal":15}`, want: message{Type: msgSignal, Signal: 15}},
		{line: `{"type":"exited","code":0}`, want: message{Type: msgExited}},
		{line: `{"type":"exited","code":255}`, want: message{Type: msgExited, Code: 255}},
		{line: `{"type":"error","code":127,"error":"command not found"}`, want: message{Type: msgError, Code: 127, Error: "command not found"}},
		{line: `{"type":"hello"}`, err: "hello without a version"},
		{line: `{"type":"started","pid":0}`, err: "started with pid 0"},
		{line: `{"type":"signal","signal":0}`, err: "signal 0 out of range"},
		{line: `{"type":"signal","signal":65}`, err: "signal 65 out of range"},
		{line: `{"type":"exited","code":256}`, err: "exit status 256 out of range"},
		{line: `{"type":"exited","code":-1}`, err: "exit status -1 out of range"},
		{line: `{"type":"reboot"}`, err: `unknown type "reboot"`},
		{line: `{"type":"start"`, err: "unexpected end of JSON"},
		{line: `{"type":"start","pid":"x"}`, err: "cannot unmarshal"},
		{line: ``, err: "unexpected end of JSON"},
		{line: `{"type":"start"}` + strings.Repeat(" ", maxLine), err: "bytes, at most"},
	} {
		got, err := decode([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("decode(%.40q) = %+v, %v; want ErrBadMessage containing %q", tc.line, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("decode(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
}

func TestDecodeTruncatesLongErrors(t *testing.T) {
	m, err := decode([]byte(`{"type":"error","code":1,"error":"` + strings.Repeat("x", 3000) + `"}`))
	if err != nil || len(m.Error) != 1024 {
		t.Fatalf("decode: %v, error of %d bytes, want 1024", err, len(m.Error))
	}
}

func TestControlRoundTripAndLimits(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := newControl(a), newControl(b)
	defer ca.Close()
	go func() {
		_ = ca.send(message{Type: msgHello, Version: protocolVersion})
		_ = ca.send(message{Type: msgExited, Code: 0})
		_, _ = a.Write(wire.Append(nil, frameMessage+1, []byte(`{"type":"start"}`)))
		_, _ = a.Write(wire.Append(nil, frameMessage, []byte(strings.Repeat("y", maxLine+10))))
	}()
	if m, err := cb.recv(); err != nil || m.Type != msgHello || m.Version != protocolVersion {
		t.Fatalf("recv hello: %+v, %v", m, err)
	}
	if m, err := cb.recv(); err != nil || m.Type != msgExited || m.Code != 0 {
		t.Fatalf("recv exited 0: %+v, %v", m, err)
	}
	if _, err := cb.recv(); !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), "frame of type") {
		t.Fatalf("recv of a frame of another type: %v, want ErrBadMessage", err)
	}
	if _, err := cb.recv(); !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("recv of an over-long message: %v, want ErrBadMessage", err)
	}
	a.Close()
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// A message cut by close is truncated; after it, the end.
	c, d := net.Pipe()
	cd := newControl(d)
	go func() {
		frame := wire.Append(nil, frameMessage, []byte(`{"type":"start"}`))
		_, _ = c.Write(frame[:len(frame)-3])
		c.Close()
	}()
	if _, err := cd.recv(); !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a message cut by close: %v, want truncated", err)
	}
	if _, err := cd.recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after close: %v, want EOF", err)
	}
	cd.Close()
}

// FuzzControlRecv: the host reads whatever the container writes on the
// socket. No bytes may panic the reader or make it take more than maxLine
// for a message, and whatever it returns is a valid message.
func FuzzControlRecv(f *testing.F) {
	f.Add(wire.Append(nil, frameMessage, []byte(`{"type":"hello","version":1}`)))
	f.Add(append(wire.Append(nil, frameMessage, []byte(`{"type":"started","pid":7}`)), wire.Append(nil, frameMessage, []byte(`{"type":"exited","code":3}`))...))
	f.Add([]byte{frameMessage, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{frameMessage + 1, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		cb := newControl(b)
		defer cb.Close()
		go func() {
			_, _ = a.Write(data)
			a.Close()
		}()
		for range 64 {
			m, err := cb.recv()
			if err != nil {
				if !errors.Is(err, ErrBadMessage) && !errors.Is(err, io.EOF) {
					t.Fatalf("error %v is neither ErrBadMessage nor EOF", err)
				}
				return
			}
			if _, err := decode(mustJSON(t, m)); err != nil {
				t.Fatalf("recv returned %+v, which does not decode: %v", m, err)
			}
		}
	})
}

func mustJSON(t *testing.T, m message) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecode: the host reads what the container sends. No input may panic, and
// whatever decodes is within the protocol's bounds.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","version":1}`, `{"type":"started","pid":7}`, `{"type":"exited","code":42}`,
		`{"type":"error","code":127,"error":"x"}`, `{"type":"signal","signal":9}`, `{}`, `[]`, `null`,
		`{"type":"exited","code":1e3}`, `{"type":"hello","version":1,"type":"start"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decode(line)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v is not ErrBadMessage", err)
			}
			return
		}
		switch m.Type {
		case msgHello, msgStart, msgStarted, msgSignal, msgExited, msgError:
		default:
			t.Fatalf("decoded unknown type %q", m.Type)
		}
		if m.Code < 0 || m.Code > 255 || m.Signal < 0 || m.Signal > 64 || len(m.Error) > 1024 {
			t.Fatalf("decoded out of bounds: %+v", m)
		}
	})
}
