package agent

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// runStreams are the run's ends (given to the wall) and the agent's ends (copied
// to and from frames): three pipes, or one pseudo-terminal when the controller
// has a terminal.
type runStreams struct {
	stdinR, stdoutW, stderrW *os.File // the run's
	stdinW                   *os.File // the agent writes stdin frames here
	readers                  []*os.File
	types                    []FrameType
	master                   *os.File // terminal only
	mfd                      int      // master's descriptor, for ioctls
	all                      []*os.File
}

func newRunStreams(req RunRequest) (*runStreams, error) {
	s := &runStreams{}
	if req.TTY {
		master, mfd, slave, err := openPTY()
		if err != nil {
			return nil, err
		}
		s.all = append(s.all, master, slave)
		// The same open file as master, so also non-blocking: writes of keys
		// take deadlines too and never hold the descriptor past close.
		fd, err := unix.FcntlInt(uintptr(mfd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("dup the run's terminal: %w", err)
		}
		stdinW := os.NewFile(uintptr(fd), "pty-input")
		s.all = append(s.all, stdinW)
		s.master, s.mfd = master, mfd
		s.stdinR, s.stdoutW, s.stderrW, s.stdinW = slave, slave, slave, stdinW
		s.readers, s.types = []*os.File{master}, []FrameType{FrameStdout}
		s.resize(req.Rows, req.Cols)
		return s, nil
	}
	var p [3][2]*os.File
	for i := range p {
		r, w, err := os.Pipe()
		if err != nil {
			s.close()
			return nil, fmt.Errorf("pipe for the run's streams: %w", err)
		}
		p[i] = [2]*os.File{r, w}
		s.all = append(s.all, r, w)
	}
	s.stdinR, s.stdinW = p[0][0], p[0][1]
	s.stdoutW, s.stderrW = p[1][1], p[2][1]
	s.readers = []*os.File{p[1][0], p[2][0]}
	s.types = []FrameType{FrameStdout, FrameStderr}
	return s, nil
}

// resize sets the run's terminal size; it does nothing without a terminal. The
// kernel tells the terminal's session (the wall's init) with SIGWINCH.
func (s *runStreams) resize(rows, cols uint16) {
	if s.master == nil || rows == 0 || cols == 0 {
		return
	}
	_ = unix.IoctlSetWinsize(s.mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

// closeWriters closes the run's ends once the run is over, so the copies see the
// end of its output.
func (s *runStreams) closeWriters() {
	for _, f := range []*os.File{s.stdinR, s.stdoutW, s.stderrW} {
		f.Close()
	}
}

// stopReading makes the copies' reads return now. The readers are pollable
// (pipes, and the terminal's master opened non-blocking), so a deadline wakes a
// read that would otherwise wait for a writer that never closes.
func (s *runStreams) stopReading() { s.readDeadline(time.Now()) }

// readDeadline bounds the copies' reads.
func (s *runStreams) readDeadline(t time.Time) {
	for _, f := range s.readers {
		_ = f.SetReadDeadline(t)
	}
}

func (s *runStreams) close() {
	for _, f := range s.all {
		f.Close()
	}
}
