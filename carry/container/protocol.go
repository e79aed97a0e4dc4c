package container

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/postern-dev/postern/internal/wire"
)

// The control protocol between the host and the harness: one JSON object per
// frame (package wire, type frameMessage) over the bind-mounted unix socket. The host treats every line from the
// harness as untrusted: the run shares the container with it.
//
//	harness -> host  hello {version}
//	host -> harness  start
//	harness -> host  started {pid} | error {error, code}
//	host -> harness  signal {signal}             (any number, any time after start)
//	harness -> host  exited {code}               (then the harness exits)
const (
	msgHello   = "hello"
	msgStart   = "start"
	msgStarted = "started"
	msgSignal  = "signal"
	msgExited  = "exited"
	msgError   = "error"
)

// protocolVersion is the harness's protocol; host and harness are the same binary,
// but a stale image or mount could still pair different ones.
const protocolVersion = 2 // 2: frames of package wire, not JSON lines

// maxLine bounds one message; a longer one is an error, not a larger buffer.
const maxLine = 4096

// frameMessage is the type of a frame carrying one message.
const frameMessage byte = 'J'

// ErrBadMessage is a control line that is not a valid message.
var ErrBadMessage = errors.New("container control: bad message")

type message struct {
	Type    string `json:"type"`
	Version int    `json:"version,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	Signal  int    `json:"signal,omitempty"`
	Code    int    `json:"code"`
	Error   string `json:"error,omitempty"`
}

// decode parses and checks one message's JSON.
func decode(line []byte) (message, error) {
	var m message
	if len(line) > maxLine {
		return m, fmt.Errorf("%w: %d bytes, at most %d", ErrBadMessage, len(line), maxLine)
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return message{}, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	switch m.Type {
	case msgHello:
		if m.Version <= 0 {
			return message{}, fmt.Errorf("%w: hello without a version", ErrBadMessage)
		}
	case msgStart:
	case msgStarted:
		if m.Pid <= 0 {
			return message{}, fmt.Errorf("%w: started with pid %d", ErrBadMessage, m.Pid)
		}
	case msgSignal:
		if m.Signal <= 0 || m.Signal > 64 {
			return message{}, fmt.Errorf("%w: signal %d out of range 1-64", ErrBadMessage, m.Signal)
		}
	case msgExited, msgError:
		if m.Code < 0 || m.Code > 255 {
			return message{}, fmt.Errorf("%w: exit status %d out of range 0-255", ErrBadMessage, m.Code)
		}
	default:
		return message{}, fmt.Errorf("%w: unknown type %q", ErrBadMessage, m.Type)
	}
	if len(m.Error) > 1024 {
		m.Error = m.Error[:1024]
	}
	return m, nil
}

// control is one end of the control connection. send is safe for concurrent
// use; recv is for one reader.
type control struct {
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

func newControl(c net.Conn) *control {
	return &control{conn: c, r: bufio.NewReaderSize(c, wire.HeaderLen+maxLine)}
}

func (c *control) send(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.conn.Write(wire.Append(nil, frameMessage, b))
	return err
}

// recv reads one message. io.EOF means the other end closed cleanly.
func (c *control) recv() (message, error) {
	f, err := wire.Read(c.r, maxLine)
	switch {
	case errors.Is(err, wire.ErrTooLong):
		return message{}, fmt.Errorf("%w: message longer than %d bytes", ErrBadMessage, maxLine)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return message{}, fmt.Errorf("%w: truncated message", ErrBadMessage)
	case err != nil:
		return message{}, err
	case f.Type != frameMessage:
		return message{}, fmt.Errorf("%w: frame of type %d", ErrBadMessage, f.Type)
	}
	return decode(f.Payload)
}

// Close is idempotent.
func (c *control) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}
