package main

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/term"
)

// A line postern writes goes out with CRLF only while the terminal is raw,
// and as written once it is restored or when stderr is no terminal.
func TestLineWriterCRLFWhileRaw(t *testing.T) {
	master, slave := openPTY(t, 24, 80)
	// The master side sees exactly the bytes the terminal's output
	// processing produced.
	read := func(want int) string {
		t.Helper()
		buf := make([]byte, 0, want)
		b := make([]byte, 256)
		if err := master.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for len(buf) < want {
			n, err := master.Read(b)
			buf = append(buf, b[:n]...)
			if err != nil {
				t.Fatalf("read %q: %v", buf, err)
			}
		}
		return string(buf)
	}
	w := &lineWriter{f: slave}
	// Cooked: the terminal itself turns LF into CRLF.
	if _, err := io.WriteString(w, "one\ntwo\n"); err != nil {
		t.Fatal(err)
	}
	if got := read(10); got != "one\r\ntwo\r\n" {
		t.Fatalf("cooked terminal: %q", got)
	}
	st, err := term.MakeRaw(int(slave.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	// Raw: the writer does it. A line already ending in CRLF is left so.
	n, err := io.WriteString(w, "postern: denied a\npostern: denied b\r\n")
	if err != nil || n != len("postern: denied a\npostern: denied b\r\n") {
		t.Fatalf("write: %d, %v", n, err)
	}
	if got := read(38); got != "postern: denied a\r\npostern: denied b\r\n" {
		t.Fatalf("raw terminal: %q", got)
	}
	// Without the writer a raw terminal gets the bare LF: the writer is
	// what makes the difference.
	if _, err := slave.WriteString("x\n"); err != nil {
		t.Fatal(err)
	}
	if got := read(2); got != "x\n" {
		t.Fatalf("raw terminal, written directly: %q", got)
	}
	if err := term.Restore(int(slave.Fd()), st); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "y\n"); err != nil {
		t.Fatal(err)
	}
	if got := read(3); got != "y\r\n" {
		t.Fatalf("restored terminal: %q", got)
	}

	// Not a terminal: bytes as written.
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.WriteString(&lineWriter{f: f}, "a\nb\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(b, []byte("a\nb\n")) {
		t.Fatalf("file: %q, %v", b, err)
	}
}

func TestCRLF(t *testing.T) {
	for in, want := range map[string]string{
		"":           "",
		"\n":         "\r\n",
		"a\nb":       "a\r\nb",
		"a\r\nb\n":   "a\r\nb\r\n",
		"\n\n":       "\r\n\r\n",
		"no break":   "no break",
		"\r\n\r\n":   "\r\n\r\n",
		"x\n\r\ny\n": "x\r\n\r\ny\r\n",
	} {
		if got := string(crlf([]byte(in))); got != want {
			t.Errorf("crlf(%q) = %q, want %q", in, got, want)
		}
	}
}
