package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/internal/kernel"
	"github.com/postern-dev/postern/probe"
)

// Heartbeats: each side sends one every HeartbeatInterval; a side that hears
// nothing for HeartbeatTimeout takes the other for gone.
const (
	HeartbeatInterval = time.Second
	HeartbeatTimeout  = 3 * time.Second
)

// lostKillGrace is how long a run whose controller is gone has between SIGTERM
// and SIGKILL. With HeartbeatTimeout it keeps teardown within 5 seconds.
const lostKillGrace = time.Second

// drainQuiet is how long the run's last output is waited for once every
// process of the run is gone: what is left is already in a pipe or the
// terminal, and arrives sooner than this.
const drainQuiet = 250 * time.Millisecond

// RunIO is what a run handler gets: the run's streams, the signals and terminal
// sizes the controller sends, and where events go.
type RunIO struct {
	Stdin, Stdout, Stderr *os.File
	Signals               <-chan os.Signal
	Emit                  func(event.Event)
	// KillGrace is the time between SIGTERM and SIGKILL once ctx is done.
	KillGrace time.Duration
	// OnStart is called once the run is inside its wall, with the Landlock
	// confinement it got and its guardrail seal (nil: no guardrail).
	OnStart func(landlock string, seal *SealState)
	// Place, if called before OnStart, says where the run is: its wall's
	// pid and its directory on this machine; they go home with OnStart.
	Place func(pid int, dir string)
	// Writes, called once the run is over, says what became of its writes
	// that did not reach the machine as written; it goes home with the exit.
	Writes func(lines []string)
}

// NotRunError is a command the handler could not start at all (Why is
// NotFound or NotExecutable): the controller reports it as a shell would,
// with exit status 127 or 126.
type NotRunError struct {
	Why    string
	Detail string
}

func (e *NotRunError) Error() string { return e.Why + ": " + e.Detail }

// Code is the exit status a shell gives such a command.
func (e *NotRunError) Code() int {
	if e.Why == NotFound {
		return 127
	}
	return 126
}

// Handlers do the agent's work; the agent only carries it over the wire.
type Handlers struct {
	Version string
	// Run runs one command behind the wall and returns its exit status.
	Run func(ctx context.Context, req RunRequest, rio RunIO) (int, error)
	// Probe measures this machine under the given name.
	Probe func(ctx context.Context, name string) (*probe.Record, error)
	// Workspace does one step of a run's workspace: upload is what the
	// controller sent, download what goes back.
	Workspace func(ctx context.Context, req WorkspaceRequest, upload io.Reader, download io.Writer) (*WorkspaceResult, error)
}

// Serve speaks the agent's side of the protocol on in and out: greeting, one
// request, its streams, and the exit frame. It returns when the request is done or
// the controller is gone; in the latter case the run has been killed and its wall
// torn down before Serve returns.
func Serve(ctx context.Context, in io.Reader, out io.Writer, h Handlers) error {
	w := NewWriter(out)
	hello := Hello{Protocol: Protocol, Version: h.Version, OS: runtime.GOOS, Arch: runtime.GOARCH, Kernel: kernel.Release()}
	hello.Home, _ = os.UserHomeDir()
	hash, err := selfHashCached()
	if err != nil {
		hello.Error = err.Error()
	}
	hello.Hash = hash
	if err := w.WriteRaw([]byte(Magic)); err != nil {
		return err
	}
	if err := w.WriteJSON(FrameHello, hello); err != nil {
		return err
	}
	if hello.Error != "" {
		return errors.New(hello.Error)
	}
	r := newReader(in)
	if err := ReadMagic(r); err != nil {
		return fmt.Errorf("controller greeting: %w", err)
	}
	f, err := ReadFrame(r)
	if err != nil {
		return fmt.Errorf("controller hello: %w", err)
	}
	var theirs Hello
	if err := DecodeJSON(f, FrameHello, &theirs); err != nil {
		return err
	}
	if theirs.Protocol != Protocol {
		return fmt.Errorf("controller speaks agent protocol %d, this agent %d", theirs.Protocol, Protocol)
	}
	f, err = ReadFrame(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil // the controller only asked who we are
		}
		return fmt.Errorf("read request: %w", err)
	}
	var req Request
	if err := DecodeJSON(f, FrameRequest, &req); err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &session{w: w, r: r, cancel: cancel, sigs: make(chan os.Signal, 16), stop: make(chan struct{}), lastHeard: time.Now()}
	defer s.close()
	switch req.Kind {
	case KindProbe:
		s.start(nil)
		rec, err := h.Probe(ctx, req.Name)
		if err != nil {
			return s.exit(Exit{Code: 1, Error: err.Error()})
		}
		if err := w.WriteJSON(FrameRecord, rec); err != nil {
			return err
		}
		return s.exit(Exit{})
	case KindRun:
		if req.Run == nil {
			return s.exit(Exit{Code: 1, Error: "run request without a run"})
		}
		return s.run(ctx, h, *req.Run)
	case KindWorkspace:
		if req.Workspace == nil {
			s.start(nil)
			return s.exit(Exit{Code: 1, Error: "workspace request without a step"})
		}
		return s.serveWorkspace(ctx, h, *req.Workspace)
	default:
		return s.exit(Exit{Code: 1, Error: fmt.Sprintf("unknown request kind %q", req.Kind)})
	}
}

// session is one request being served: the frame reader, the heartbeat, and the
// run's stdin.
type session struct {
	w      *Writer
	r      io.Reader
	cancel context.CancelCauseFunc
	sigs   chan os.Signal

	mu        sync.Mutex
	stdin     *os.File // the write end of the run's stdin; nil once closed
	stdinOpen bool
	stdinQ    chan []byte
	lastHeard time.Time
	winsize   func(rows, cols uint16)

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Causes of a cancelled session.
var (
	errControllerGone = errors.New("the controller closed the connection")
	errHeartbeat      = fmt.Errorf("no heartbeat from the controller for %s", HeartbeatTimeout)
)

func (s *session) start(stdin *os.File) {
	s.stdin = stdin
	s.stdinOpen = stdin != nil
	s.stdinQ = make(chan []byte, 256)
	s.wg.Add(2)
	go s.readLoop()
	go s.heartbeatLoop()
	if stdin != nil {
		s.wg.Add(1)
		go s.stdinLoop()
	}
}

// stdinLoop writes stdin frames to the run, so that a run that does not read its
// stdin never stops the reader from hearing heartbeats. A nil chunk is the end.
func (s *session) stdinLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case b := <-s.stdinQ:
			s.mu.Lock()
			f := s.stdin
			s.mu.Unlock()
			if b == nil || f == nil {
				s.closeStdin()
				continue
			}
			if _, err := f.Write(b); err != nil {
				s.closeStdin()
			}
		}
	}
}

// readLoop reads the controller's frames until the stream ends. It is not stopped
// by close: it ends when the controller closes its side, which is also when the
// agent process ends.
func (s *session) readLoop() {
	defer s.wg.Done()
	for {
		f, err := ReadFrame(s.r)
		if err != nil {
			s.closeStdin()
			s.cancel(errControllerGone)
			return
		}
		s.mu.Lock()
		s.lastHeard = time.Now()
		stdin := s.stdinOpen
		s.mu.Unlock()
		switch f.Type {
		case FrameStdin:
			if stdin {
				s.stdinQ <- f.Payload
				s.mu.Lock()
				s.lastHeard = time.Now()
				s.mu.Unlock()
			}
		case FrameStdinEOF:
			if stdin {
				s.stdinQ <- nil
			}
		case FrameSignal:
			select {
			case s.sigs <- syscall.Signal(DecodeSignal(f.Payload)):
			default:
			}
		case FrameWinsize:
			rows, cols := DecodeWinsize(f.Payload)
			s.mu.Lock()
			ws := s.winsize
			s.mu.Unlock()
			if ws != nil {
				ws(rows, cols)
				select {
				case s.sigs <- syscall.SIGWINCH:
				default:
				}
			}
		case FrameHeartbeat:
		}
		if f.Type == FrameStdinEOF {
			s.mu.Lock()
			s.stdinOpen = false
			s.mu.Unlock()
		}
	}
}

func (s *session) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			quiet := time.Since(s.lastHeard)
			s.mu.Unlock()
			if quiet > HeartbeatTimeout {
				s.cancel(errHeartbeat)
			}
			if err := s.w.Write(FrameHeartbeat, nil); err != nil {
				s.cancel(errControllerGone)
			}
		}
	}
}

func (s *session) closeStdin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stdin != nil {
		s.stdin.Close()
		s.stdin = nil
	}
}

func (s *session) exit(e Exit) error {
	return s.w.WriteJSON(FrameExit, e)
}

// close stops the heartbeat. The reader goroutine is left to end with the stream.
func (s *session) close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.closeStdin()
	})
}

func (s *session) run(ctx context.Context, h Handlers, req RunRequest) error {
	streams, err := newRunStreams(req)
	if err != nil {
		s.start(nil)
		return s.exit(Exit{Code: 1, Error: err.Error()})
	}
	defer streams.close()
	s.winsize = streams.resize
	s.start(streams.stdinW)

	// The copies read until the run's ends are closed. Once the run is over,
	// ended is closed and they read only what is already there: a read that
	// finds nothing for drainQuiet ends the copy, since something outside the
	// run (a reader blocked on the terminal's other side) may keep a write end
	// open.
	var copies sync.WaitGroup
	ended := make(chan struct{})
	pump := func(src *os.File, t FrameType) {
		defer copies.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				// Once the controller is gone writes fail; reading goes on so
				// the run never blocks on a full pipe while it is being killed.
				_ = s.w.Write(t, buf[:n])
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				select {
				case <-ended:
				default:
					continue
				}
				if n == 0 {
					return
				}
			} else if err != nil {
				return
			}
			select {
			case <-ended:
				_ = src.SetReadDeadline(time.Now().Add(drainQuiet))
			default:
			}
		}
	}
	copies.Add(len(streams.readers))
	for i, rd := range streams.readers {
		go pump(rd, streams.types[i])
	}

	var (
		writes   []string
		pid      int
		startDir string
	)
	code, runErr := h.Run(ctx, req, RunIO{
		Stdin: streams.stdinR, Stdout: streams.stdoutW, Stderr: streams.stderrW,
		Signals:   s.sigs,
		Emit:      func(ev event.Event) { _ = s.w.WriteJSON(FrameEvent, ev) },
		KillGrace: lostKillGrace,
		OnStart: func(landlock string, seal *SealState) {
			_ = s.w.WriteJSON(FrameStarted, Started{Landlock: landlock, Seal: seal, Pid: pid, Dir: startDir})
		},
		Place:  func(p int, d string) { pid, startDir = p, d },
		Writes: func(lines []string) { writes = lines },
	})
	// Every process of the run is gone: close the write ends so the copies
	// drain what is left and end.
	streams.closeWriters()
	close(ended)
	if ctx.Err() != nil {
		streams.stopReading() // the controller is gone: no one wants the rest
	} else {
		streams.readDeadline(time.Now().Add(drainQuiet))
	}
	copies.Wait()
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		return fmt.Errorf("run %s ended: %w", req.ID, cause)
	}
	// A run the remote kernel would not wall is a *carry.Refusal from the
	// handler: the controller reports a refusal rather than a failure.
	var ref *carry.Refusal
	var nr *NotRunError
	switch {
	case errors.As(runErr, &ref):
		reason := ref.AtRunTime
		if reason == "" {
			reason = ref.Error()
		}
		return s.exit(Exit{Code: 1, Error: reason, Refused: true, Fix: ref.Fix})
	case errors.As(runErr, &nr):
		return s.exit(Exit{Code: nr.Code(), Error: nr.Detail, NotRun: nr.Why})
	case runErr != nil:
		return s.exit(Exit{Code: code, Error: runErr.Error(), Writes: writes})
	}
	return s.exit(Exit{Code: code, Writes: writes})
}
