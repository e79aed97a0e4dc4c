package door

import (
	"errors"
	"io"
	"net"
	"sync"
)

// An idle tunnel must cost the door its two sockets and nothing else: no
// pipe, no buffer, one parked goroutine per direction. io.Copy between two
// *net.TCPConn splices through a pipe it takes at the start and holds until
// the copy ends, so every idle direction would pin two descriptors. relay
// instead waits for the source to become readable holding nothing, moves what
// is there through a pipe (Linux) or a buffer from a pool, and gives the pipe
// or buffer back before it waits again.

// pump copies src to dst until src ends, then half-closes dst; on an error it
// closes both so the other direction ends too. It returns the bytes moved.
func pump(dst, src net.Conn) int64 {
	n, err := relay(dst, src)
	if err != nil {
		src.Close()
		dst.Close()
		return n
	}
	closeWrite(dst)
	return n
}

// relay copies src to dst until src reaches EOF (nil error) or fails.
func relay(dst, src net.Conn) (int64, error) {
	n, handled, err := spliceRelay(dst, src)
	if handled {
		return n, err
	}
	m, err := bufferRelay(dst, src)
	return n + m, err
}

// maxFreePipes bounds the splice pipes kept for reuse; beyond it a returned
// pipe is closed, so a burst of transfers does not leave descriptors behind.
const maxFreePipes = 16

// relayBufSize is the buffer a relay without splice moves bytes with; the
// bigger the writes, the fewer and fuller the segments the kernel sends.
const relayBufSize = 64 << 10

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// bufferRelay copies with a pooled buffer that is held only while bytes are
// in flight: between reads it waits for readability with no buffer.
func bufferRelay(dst, src net.Conn) (int64, error) {
	var written int64
	for {
		if err := waitReadable(src); err != nil {
			return written, err
		}
		bp := relayBufs.Get().(*[]byte)
		n, rerr := src.Read(*bp)
		var werr error
		if n > 0 {
			var m int
			m, werr = dst.Write((*bp)[:n])
			written += int64(m)
			if werr == nil && m < n {
				werr = io.ErrShortWrite
			}
		}
		relayBufs.Put(bp)
		if werr != nil {
			return written, werr
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return written, nil
			}
			return written, rerr
		}
	}
}
