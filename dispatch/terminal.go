package dispatch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// terminal gives a run its own pseudo-terminal instead of the person's: the run
// cannot reach the person's terminal (no TIOCSTI into the shell that started
// postern, no reading keys from a terminal it was handed as stdout), yet sees a
// real terminal with the person's size, and keys such as Ctrl-C and Ctrl-Z act
// inside the run.
type terminal struct {
	keys     *os.File // the person's terminal as stdin; nil when only output is a terminal
	screen   *os.File // where the run's terminal output goes
	master   *os.File
	slave    *os.File
	oldState *term.State
	wg       sync.WaitGroup
	once     sync.Once
}

func isTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// start puts the person's terminal in raw mode and copies keys in (when stdin is
// a terminal) and output out. The run holds the slave side from here on.
func (t *terminal) start() error {
	if t.keys != nil {
		st, err := term.MakeRaw(int(t.keys.Fd()))
		if err != nil {
			return fmt.Errorf("set the terminal raw: %w", err)
		}
		t.oldState = st
	}
	t.slave.Close()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		// Ends when the run's side of the terminal closes (EIO on the master).
		_, _ = io.Copy(t.screen, t.master)
	}()
	if t.keys != nil {
		// Keys: this copy blocks reading the person's terminal and cannot be
		// woken portably, so it is left to end with the process; it writes only
		// to master, which close() closes.
		go func() { _, _ = io.Copy(t.master, t.keys) }()
	}
	return nil
}

// resize copies the person's terminal size to the run's.
func (t *terminal) resize() {
	ws, err := unix.IoctlGetWinsize(int(t.screen.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	_ = unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
}

// wait waits until the run's output has all been copied out.
func (t *terminal) wait() { t.wg.Wait() }

func (t *terminal) close() error {
	var err error
	t.once.Do(func() {
		if t.oldState != nil {
			err = term.Restore(int(t.keys.Fd()), t.oldState)
		}
		err = errors.Join(err, t.master.Close())
		_ = t.slave.Close()
	})
	return err
}
