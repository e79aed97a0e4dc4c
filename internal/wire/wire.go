package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderLen is the length of a frame's header: its type and its length.
const HeaderLen = 5

// ErrTooLong is a frame whose length is over the reader's limit.
var ErrTooLong = errors.New("frame over the limit")

// Frame is one frame: its type and payload.
type Frame struct {
	Type    byte
	Payload []byte
}

// Append appends the encoding of a frame to b.
func Append(b []byte, t byte, payload []byte) []byte {
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// ParseHeader reads a frame's header: its type and the payload's length,
// which must be at most max.
func ParseHeader(h []byte, max uint32) (t byte, n uint32, err error) {
	if len(h) < HeaderLen {
		return 0, 0, io.ErrUnexpectedEOF
	}
	t, n = h[0], binary.BigEndian.Uint32(h[1:HeaderLen])
	if n > max {
		return t, n, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLong, n, max)
	}
	return t, n, nil
}

// Read reads one frame whose payload is at most max bytes. A stream that
// ends between frames is io.EOF; one that ends inside a frame is
// io.ErrUnexpectedEOF.
func Read(r io.Reader, max uint32) (Frame, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	t, n, err := ParseHeader(h[:], max)
	if err != nil {
		return Frame{Type: t}, err
	}
	f := Frame{Type: t, Payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{Type: t}, err
	}
	return f, nil
}
