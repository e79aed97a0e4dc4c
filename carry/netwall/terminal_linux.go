package netwall

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// drainTimeout bounds how long the init waits, once the command has ended, for
// the last of its output to cross from the run's terminal to the caller's.
const drainTimeout = 2 * time.Second

// ownTerminals mounts a devpts instance of the run's own on /dev/pts and
// points /dev/ptmx at it. The host's devpts would otherwise stay visible, and
// as root the run's uid owns the host's other terminals (/dev/pts/N, mode
// 620): it could open an operator's terminal and read the keys typed there.
// It must come before sealHost, which leaves /dev/pts writable and /dev
// read-only.
func ownTerminals() error {
	if st, err := os.Stat("/dev/pts"); err != nil || !st.IsDir() {
		return nil // no devpts to hide; the run has no terminals but what it is given
	}
	opts := "newinstance,ptmxmode=0666,mode=0620"
	if gid, ok := ttyGID(); ok {
		opts += ",gid=" + strconv.Itoa(gid)
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount a devpts of the run's own on /dev/pts (%s): %w", opts, err)
	}
	// A symlink (pts/ptmx) already leads to the new instance.
	if st, err := os.Lstat("/dev/ptmx"); err == nil && st.Mode()&fs.ModeSymlink == 0 {
		if err := unix.Mount("/dev/pts/ptmx", "/dev/ptmx", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/pts/ptmx onto /dev/ptmx: %w", err)
		}
	}
	return nil
}

// ttyGID is the tty group as the run's user namespace numbers it, if the
// namespace maps it (the mount refuses a gid it does not map).
func ttyGID() (int, bool) {
	f, err := os.Open("/etc/group")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	host := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 3 && fields[0] == "tty" {
			if n, err := strconv.Atoi(fields[2]); err == nil {
				host = n
			}
			break
		}
	}
	if host < 0 {
		return 0, false
	}
	data, err := os.ReadFile("/proc/self/gid_map")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		inside, outside, count, ok := idMapLine(line)
		if ok && host >= outside && host < outside+count {
			return inside + host - outside, true
		}
	}
	return 0, false
}

// idMapLine reads one line of a uid_map or gid_map: the first id inside, the
// first outside, how many (three numbers, spaces before and between).
func idMapLine(line string) (inside, outside, count int, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return 0, 0, 0, false
	}
	var n [3]int
	for i, s := range f {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, 0, 0, false
		}
		n[i] = int(v)
	}
	return n[0], n[1], n[2], true
}

// runTerminal is the run's own terminal, a pty of its devpts, relayed to the
// terminal the caller gave (a pty slave of the host's, the init's stdin). The
// command cannot use the caller's directly: its name, /dev/pts/N, is not the
// run's /dev/pts/N, so ttyname and tty(1) would fail.
type runTerminal struct {
	host   *os.File // the caller's terminal: keys come from it
	out    *os.File // where output goes: fd 1 if it is that terminal too, else fd 0
	master *os.File // the run's side, read and written by the relay
	mfd    int      // master's descriptor, for ioctls
	slave  *os.File // given to the command, then closed here
	same   [3]bool  // which of fds 0, 1, 2 are the caller's terminal
	saved  *term.State
	copied chan struct{} // closed when the output copy has ended
}

// openRunTerminal makes the init the session leader of the caller's terminal
// (so that its resizes arrive as SIGWINCH), sets that terminal raw so every
// key passes through, and opens the run's terminal with the caller's modes
// and size.
func openRunTerminal() (*runTerminal, error) {
	if _, err := unix.Setsid(); err != nil {
		return nil, fmt.Errorf("new session for the terminal: %w", err)
	}
	if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
		return nil, fmt.Errorf("take the terminal on stdin as controlling terminal (is it another session's?): %w", err)
	}
	modes, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("read the terminal's modes: %w", err)
	}
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open a terminal in the run's /dev/ptmx: %w", err)
	}
	// Non-blocking before NewFile: the relay's reads then take a deadline.
	master := os.NewFile(uintptr(mfd), "run-terminal")
	fail := func(err error) (*runTerminal, error) {
		master.Close()
		return nil, err
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlock the run's terminal: %w", err))
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("name the run's terminal: %w", err))
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("open the run's terminal: %w", err))
	}
	t := &runTerminal{host: os.Stdin, out: os.Stdin, master: master, mfd: mfd, slave: slave, copied: make(chan struct{})}
	var st0 unix.Stat_t
	if err := unix.Fstat(0, &st0); err == nil {
		for fd := range t.same {
			var st unix.Stat_t
			t.same[fd] = unix.Fstat(fd, &st) == nil && st.Dev == st0.Dev && st.Ino == st0.Ino
		}
	}
	if t.same[1] {
		t.out = os.Stdout
	}
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, modes); err != nil {
		slave.Close()
		return fail(fmt.Errorf("copy the terminal's modes: %w", err))
	}
	t.resize()
	if t.saved, err = term.MakeRaw(0); err != nil {
		slave.Close()
		return fail(fmt.Errorf("set the terminal raw: %w", err))
	}
	return t, nil
}

// stdio is the command's fds 0, 1 and 2: the run's terminal wherever the
// caller's terminal was.
func (t *runTerminal) stdio() []uintptr {
	fds := []uintptr{0, 1, 2}
	for i := range fds {
		if t.same[i] {
			fds[i] = t.slave.Fd()
		}
	}
	return fds
}

// relay copies keys in and output out until the process ends. The init keeps
// its own descriptor of the run's side open until drain: a command that closes
// every descriptor of its terminal and opens /dev/tty again a moment later
// would otherwise leave the run's side closed in between, end the output copy
// (EIO), and lose what it writes next.
func (t *runTerminal) relay() {
	go func() {
		defer close(t.copied)
		_, _ = io.Copy(t.out, t.master)
	}()
	// Keys: blocks reading the caller's terminal; ends with the process.
	go func() { _, _ = io.Copy(t.master, t.host) }()
}

// resize gives the run's terminal the caller's size; the kernel sends the
// run SIGWINCH when it changes.
func (t *runTerminal) resize() {
	if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(t.mfd, unix.TIOCSWINSZ, ws)
	}
}

// drain waits for the run's last output to reach the caller's terminal. The
// run's other processes must be gone already, or they would hold it open.
func (t *runTerminal) drain() {
	// With the init's descriptor closed too, the output copy reads what is left
	// and ends (EIO).
	t.slave.Close()
	select {
	case <-t.copied:
	case <-time.After(drainTimeout):
		_ = t.master.SetReadDeadline(time.Now())
		<-t.copied
	}
}

// restore puts the caller's terminal back in the modes it had.
func (t *runTerminal) restore() {
	if t.saved != nil {
		_ = term.Restore(0, t.saved)
	}
}
