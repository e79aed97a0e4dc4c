package agent

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteRaw([]byte(Magic)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteJSON(FrameHello, Hello{Protocol: Protocol, Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), MaxFrame+10)
	if err := w.Write(FrameStdout, big); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(FrameSignal, SignalPayload(15)); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(FrameWinsize, WinsizePayload(40, 120)); err != nil {
		t.Fatal(err)
	}
	r := newReader(&buf)
	if err := ReadMagic(r); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(r)
	if err != nil {
		t.Fatal(err)
	}
	var h Hello
	if err := DecodeJSON(f, FrameHello, &h); err != nil || h.Version != "v1" || h.Protocol != Protocol {
		t.Fatalf("hello = %+v, %v", h, err)
	}
	var got []byte
	for len(got) < len(big) {
		f, err := ReadFrame(r)
		if err != nil || f.Type != FrameStdout {
			t.Fatalf("stdout frame: %v %v", f.Type, err)
		}
		got = append(got, f.Payload...)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("a payload over MaxFrame was not split and rejoined intact")
	}
	if f, err := ReadFrame(r); err != nil || DecodeSignal(f.Payload) != 15 {
		t.Fatalf("signal frame: %+v %v", f, err)
	}
	f, err = ReadFrame(r)
	if rows, cols := DecodeWinsize(f.Payload); err != nil || rows != 40 || cols != 120 {
		t.Fatalf("winsize frame: %d %d %v", rows, cols, err)
	}
	if _, err := ReadFrame(r); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func TestReadMagicRejectsShellOutput(t *testing.T) {
	for _, in := range []string{
		"Welcome to the machine!\n" + Magic,
		"sh: 1: /root/.cache/postern/agents/x/postern: not found\n",
		"",
		Magic[:5],
	} {
		err := ReadMagic(strings.NewReader(in))
		var na *NotAgentError
		if !errors.As(err, &na) || !errors.Is(err, ErrNotAgent) {
			t.Errorf("ReadMagic(%q) = %v, want a *NotAgentError", in, err)
		}
	}
	if err := ReadMagic(strings.NewReader(Magic + "rest")); err != nil {
		t.Errorf("ReadMagic(Magic) = %v", err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"unknown type":      AppendFrame(nil, 99, nil),
		"zero type":         AppendFrame(nil, 0, nil),
		"over the limit":    {byte(FrameStdout), 0x7f, 0xff, 0xff, 0xff},
		"short signal":      AppendFrame(nil, FrameSignal, []byte{1}),
		"heartbeat payload": AppendFrame(nil, FrameHeartbeat, []byte{1}),
	} {
		if _, err := ReadFrame(bytes.NewReader(in)); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: err = %v, want ErrBadFrame", name, err)
		}
	}
	if _, err := ReadFrame(bytes.NewReader(AppendFrame(nil, FrameStdout, []byte("abc"))[:6])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated payload: err = %v, want unexpected EOF", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the decoder: it must never panic, never
// accept an unknown type or an oversized or misshapen frame, and re-encode what it
// accepts to the same bytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, FrameHello, []byte(`{"protocol":1}`)))
	f.Add(AppendFrame(nil, FrameSignal, SignalPayload(2)))
	f.Add(AppendFrame(AppendFrame(nil, FrameStdin, []byte("hi")), FrameStdinEOF, nil))
	f.Add([]byte{byte(FrameExit), 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			start := len(b) - r.Len()
			fr, err := ReadFrame(r)
			if err != nil {
				return
			}
			if _, ok := frameNames[fr.Type]; !ok || len(fr.Payload) > MaxFrame {
				t.Fatalf("accepted %v with %d bytes", fr.Type, len(fr.Payload))
			}
			if n, ok := fixedSize[fr.Type]; ok && len(fr.Payload) != n {
				t.Fatalf("accepted %v with %d bytes, want %d", fr.Type, len(fr.Payload), n)
			}
			end := len(b) - r.Len()
			if !bytes.Equal(AppendFrame(nil, fr.Type, fr.Payload), b[start:end]) {
				t.Fatalf("re-encoding differs")
			}
			switch fr.Type {
			case FrameHello:
				var h Hello
				_ = DecodeJSON(fr, FrameHello, &h)
			case FrameRequest:
				var q Request
				_ = DecodeJSON(fr, FrameRequest, &q)
			case FrameExit:
				var e Exit
				_ = DecodeJSON(fr, FrameExit, &e)
			case FrameSignal:
				_ = DecodeSignal(fr.Payload)
			case FrameWinsize:
				_, _ = DecodeWinsize(fr.Payload)
			}
		}
	})
}

// FuzzReadMagic: any prefix that is not Magic is refused, never accepted.
func FuzzReadMagic(f *testing.F) {
	f.Add([]byte(Magic))
	f.Add([]byte("Last login: yesterday\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ReadMagic(bytes.NewReader(b))
		if err == nil && !bytes.HasPrefix(b, []byte(Magic)) {
			t.Fatalf("accepted %q", b)
		}
		if err != nil && bytes.HasPrefix(b, []byte(Magic)) {
			t.Fatalf("refused a stream starting with Magic: %v", err)
		}
	})
}
