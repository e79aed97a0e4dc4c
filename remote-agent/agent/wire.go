package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/postern-dev/postern/internal/wire"
)

// Magic opens each side of the stream, before any frame.
const Magic = "\x00POSTERN-AGENT\x00"

// Protocol is the wire protocol's version. Both sides must speak the same one.
const Protocol = 1

// MaxFrame is the largest payload a frame may carry.
const MaxFrame = 1 << 20

// FrameType says what a frame carries.
type FrameType byte

// Frame types. The zero value is invalid.
const (
	FrameHello     FrameType = 1  // JSON Hello
	FrameRequest   FrameType = 2  // JSON Request
	FrameStdin     FrameType = 3  // bytes for the run's stdin
	FrameStdinEOF  FrameType = 4  // the run's stdin ends
	FrameStdout    FrameType = 5  // bytes the run wrote to stdout
	FrameStderr    FrameType = 6  // bytes the run wrote to stderr
	FrameEvent     FrameType = 7  // JSON event.Event
	FrameSignal    FrameType = 8  // 4 bytes: a signal number for the run
	FrameWinsize   FrameType = 9  // 4 bytes: rows, cols
	FrameExit      FrameType = 10 // JSON Exit: the last frame of a request
	FrameHeartbeat FrameType = 11 // empty: the other side is alive
	FrameStarted   FrameType = 12 // JSON Started: the run is inside its wall
	FrameRecord    FrameType = 13 // JSON probe.Record
)

var frameNames = map[FrameType]string{
	FrameHello: "hello", FrameRequest: "request", FrameStdin: "stdin", FrameStdinEOF: "stdin-eof",
	FrameStdout: "stdout", FrameStderr: "stderr", FrameEvent: "event", FrameSignal: "signal",
	FrameWinsize: "winsize", FrameExit: "exit", FrameHeartbeat: "heartbeat", FrameStarted: "started",
	FrameRecord: "record",
}

func (t FrameType) String() string {
	if n, ok := frameNames[t]; ok {
		return n
	}
	return fmt.Sprintf("frame-type-%d", byte(t))
}

// fixedSize is the exact payload size of fixed-size frames.
var fixedSize = map[FrameType]int{FrameStdinEOF: 0, FrameHeartbeat: 0, FrameSignal: 4, FrameWinsize: 4}

// Frame is one message.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// Errors of the wire.
var (
	// ErrNotAgent means the other side did not start with Magic: a shell banner, a
	// missing binary's error message, or not postern at all.
	ErrNotAgent = errors.New("not a postern agent stream")
	// ErrBadFrame is a frame that breaks the protocol.
	ErrBadFrame = errors.New("bad agent frame")
)

// NotAgentError is what came instead of Magic.
type NotAgentError struct{ Got []byte }

func (e *NotAgentError) Error() string {
	return fmt.Sprintf("%v: the stream began with %q instead of the agent's greeting", ErrNotAgent, e.Got)
}
func (e *NotAgentError) Unwrap() error { return ErrNotAgent }

// ReadMagic reads and checks the other side's Magic.
func ReadMagic(r io.Reader) error {
	got := make([]byte, len(Magic))
	n, err := io.ReadFull(r, got)
	if n > 0 && !bytes.Equal(got[:n], []byte(Magic)[:n]) {
		// Collect a little more of what was said, for the message.
		more := make([]byte, 200)
		m, _ := io.ReadAtLeast(r, more, 0)
		return &NotAgentError{Got: append(got[:n], more[:m]...)}
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &NotAgentError{Got: got[:n]}
		}
		return fmt.Errorf("read agent greeting: %w", err)
	}
	return nil
}

// ReadFrame reads one frame (see package wire). It never allocates more
// than MaxFrame for a payload.
func ReadFrame(r io.Reader) (Frame, error) {
	var head [wire.HeaderLen]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return Frame{}, err
	}
	b, n, lerr := wire.ParseHeader(head[:], MaxFrame)
	t := FrameType(b)
	if _, ok := frameNames[t]; !ok {
		return Frame{}, fmt.Errorf("%w: unknown type %d", ErrBadFrame, b)
	}
	if lerr != nil {
		return Frame{}, fmt.Errorf("%w: %s frame of %d bytes is over the limit of %d", ErrBadFrame, t, n, MaxFrame)
	}
	if want, ok := fixedSize[t]; ok && int(n) != want {
		return Frame{}, fmt.Errorf("%w: %s frame of %d bytes, want %d", ErrBadFrame, t, n, want)
	}
	f := Frame{Type: t, Payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("read %s frame: %w", t, err)
	}
	return f, nil
}

// AppendFrame appends the encoding of a frame to b.
func AppendFrame(b []byte, t FrameType, payload []byte) []byte {
	return wire.Append(b, byte(t), payload)
}

// Writer writes frames; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewWriter writes frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write sends one frame. Payloads over MaxFrame are split into several frames of
// the same type; only data frames (stdin, stdout, stderr) may be that long.
func (w *Writer) Write(t FrameType, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	for {
		chunk := payload
		if len(chunk) > MaxFrame {
			chunk = chunk[:MaxFrame]
		}
		w.buf = AppendFrame(w.buf[:0], t, chunk)
		if _, err := w.w.Write(w.buf); err != nil {
			w.err = fmt.Errorf("write %s frame: %w", t, err)
			return w.err
		}
		payload = payload[len(chunk):]
		if len(payload) == 0 {
			return nil
		}
	}
}

// WriteJSON sends v as a JSON frame.
func (w *Writer) WriteJSON(t FrameType, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", t, err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("%w: %s frame of %d bytes is over the limit of %d", ErrBadFrame, t, len(b), MaxFrame)
	}
	return w.Write(t, b)
}

// WriteRaw writes bytes outside any frame (Magic).
func (w *Writer) WriteRaw(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

// DecodeJSON decodes a JSON frame of type t into v.
func DecodeJSON(f Frame, t FrameType, v any) error {
	if f.Type != t {
		return fmt.Errorf("%w: got a %s frame, want %s", ErrBadFrame, f.Type, t)
	}
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("%w: decode %s: %v", ErrBadFrame, t, err)
	}
	return nil
}

// SignalPayload encodes a signal number.
func SignalPayload(sig int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(sig)) }

// DecodeSignal decodes a signal frame's payload.
func DecodeSignal(p []byte) int { return int(binary.BigEndian.Uint32(p)) }

// WinsizePayload encodes a terminal size.
func WinsizePayload(rows, cols uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, rows)
	return binary.BigEndian.AppendUint16(b, cols)
}

// DecodeWinsize decodes a winsize frame's payload.
func DecodeWinsize(p []byte) (rows, cols uint16) {
	return binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
}

// newReader buffers r for frame reading.
func newReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// Hello is what each side says first, after Magic.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	// The agent's side only:
	Hash   string `json:"hash,omitempty"` // sha256 of the agent's own executable
	OS     string `json:"os,omitempty"`
	Arch   string `json:"arch,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	Home   string `json:"home,omitempty"`
	Error  string `json:"error,omitempty"` // the agent cannot serve (e.g. its hash does not match)
}

// Request is what the controller asks of the agent: one run or one probe.
type Request struct {
	Kind string      `json:"kind"` // "run" or "probe"
	Run  *RunRequest `json:"run,omitempty"`
	// Probe: the machine's name in the controller's inventory.
	Name string `json:"name,omitempty"`
	// Workspace: one step of a run's workspace (see workspace.go).
	Workspace *WorkspaceRequest `json:"workspace,omitempty"`
}

// Request kinds.
const (
	KindRun   = "run"
	KindProbe = "probe"
)

// RunRequest is one run on the remote.
type RunRequest struct {
	ID       string   `json:"id"`
	Machine  string   `json:"machine"`
	Lane     string   `json:"lane"`
	Command  []string `json:"command"`
	Dir      string   `json:"dir,omitempty"` // "" is a directory of the run's own on the remote
	Env      []string `json:"env,omitempty"` // added to the agent's own environment
	Policy   []byte   `json:"policy,omitempty"`
	PolicyAt string   `json:"policy_at,omitempty"` // the policy's file name, for messages
	AddHosts []string `json:"add_hosts,omitempty"`
	Resolver string   `json:"resolver,omitempty"`
	TTY      bool     `json:"tty,omitempty"`
	// Open is the person's reason to run with no wall and no door
	// (--egress-open); "" walls the run.
	Open string `json:"open,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// KeepHome keeps what the run wrote in its home on the remote, rather
	// than discarding it (--keep-home).
	KeepHome bool `json:"keep_home,omitempty"`
	// PidsLimit overrides the policy's pids_limit when set (--pids-limit).
	PidsLimit int `json:"pids_limit,omitempty"`
	// NoNetwork runs the command with no network at all (--network none).
	NoNetwork bool `json:"no_network,omitempty"`
}

// Started says the run is inside its wall.
type Started struct {
	Landlock string `json:"landlock,omitempty"` // the Landlock ABI applied, e.g. "v4", or why none
	// Seal is whether the policy's guardrail seal held, measured beside the
	// run: held only when every guardrail answered there.
	Seal *SealState `json:"seal,omitempty"`
	// Pid is the run's wall's pid on the remote, 0 if unknown; Dir is the
	// directory the command started in there.
	Pid int    `json:"pid,omitempty"`
	Dir string `json:"dir,omitempty"`
}

// SealState is a guardrail seal as measured beside a run.
type SealState struct {
	Held      bool   `json:"held"`
	Guardrail string `json:"guardrail"`
	Why       string `json:"why,omitempty"`
}

// Exit ends a request.
type Exit struct {
	Code int `json:"code"`
	// Error is set when the request failed rather than the run exiting.
	Error string `json:"error,omitempty"`
	// Refused is set when the remote kernel refused the wall: Error is then the
	// refusal's text (without the marker) and Fix its remedy.
	Refused bool   `json:"refused,omitempty"`
	Fix     string `json:"fix,omitempty"`
	// Writes says what became of the run's writes on the remote machine
	// that did not reach it as written (see records.Run).
	Writes []string `json:"writes,omitempty"`
	// NotRun is set when the command could not be started at all:
	// NotFound (Code 127) or NotExecutable (126); Error then says where it
	// was looked for or why it cannot be executed.
	NotRun string `json:"not_run,omitempty"`
	// Workspace is what a workspace step found or made.
	Workspace *WorkspaceResult `json:"workspace,omitempty"`
}

// Exit.NotRun values.
const (
	NotFound      = "not-found"
	NotExecutable = "not-executable"
)
