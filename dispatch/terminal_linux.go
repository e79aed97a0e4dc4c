package dispatch

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openTerminal makes the run's pseudo-terminal. keys is the person's terminal when
// stdin is one (nil when only output is); screen is where output goes.
func openTerminal(keys, screen *os.File) (*terminal, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal for the run: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("name pseudo-terminal: %w", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open pseudo-terminal /dev/pts/%d: %w", n, err)
	}
	t := &terminal{keys: keys, screen: screen, master: master, slave: slave}
	t.resize()
	return t, nil
}
