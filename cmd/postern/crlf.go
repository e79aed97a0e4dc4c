package main

import (
	"bytes"
	"os"
)

// stderr is where postern's own lines go (denials, the start line, errors).
var stderr = &lineWriter{f: os.Stderr}

// lineWriter writes postern's own lines to a file that may be the person's
// terminal. While a run has the terminal raw (no output processing), a bare
// LF only moves down a line and the next line would start where the last
// ended; so while it is raw each LF goes out as CRLF. The terminal's state is
// read at each write: whoever made it raw (a local run's terminal, a remote
// run's), the lines come out right, and as they are once it is restored.
type lineWriter struct{ f *os.File }

func (w *lineWriter) Write(p []byte) (int, error) {
	if !bytes.ContainsRune(p, '\n') || !outputRaw(w.f) {
		return w.f.Write(p)
	}
	if _, err := w.f.Write(crlf(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// crlf is p with every LF not already after a CR written CRLF.
func crlf(p []byte) []byte {
	out := make([]byte, 0, len(p)+bytes.Count(p, []byte{'\n'}))
	for i, b := range p {
		if b == '\n' && (i == 0 || p[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, b)
	}
	return out
}
