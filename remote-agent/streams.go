package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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
	all                      []*os.File
}

func newRunStreams(req RunRequest) (*runStreams, error) {
	s := &runStreams{}
	if req.TTY {
		master, slave, err := openPTY()
		if err != nil {
			return nil, err
		}
		s.all = append(s.all, master, slave)
		stdinW, err := dupFile(master, "pty-input")
		if err != nil {
			s.close()
			return nil, err
		}
		s.all = append(s.all, stdinW)
		s.master = master
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

// resize sets the run's terminal size; it does nothing without a terminal.
func (s *runStreams) resize(rows, cols uint16) {
	if s.master == nil || rows == 0 || cols == 0 {
		return
	}
	_ = unix.IoctlSetWinsize(int(s.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

// closeWriters closes the run's ends once the run is over, so the copies see the
// end of its output.
func (s *runStreams) closeWriters() {
	for _, f := range []*os.File{s.stdinR, s.stdoutW, s.stderrW} {
		f.Close()
	}
}

func (s *runStreams) close() {
	for _, f := range s.all {
		f.Close()
	}
}

func dupFile(f *os.File, name string) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal for the run: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("name pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, errors.Join(fmt.Errorf("open pseudo-terminal /dev/pts/%d", n), err)
	}
	return master, slave, nil
}
