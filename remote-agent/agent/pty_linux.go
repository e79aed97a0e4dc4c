package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal. The master is non-blocking and its
// descriptor is returned for ioctls: calling Fd on it would make it blocking,
// and a blocked read of a blocking descriptor keeps it open past Close.
func openPTY() (master *os.File, mfd int, slave *os.File, err error) {
	mfd, err = unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("open a pseudo-terminal for the run: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "pty-master")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, 0, nil, fmt.Errorf("unlock pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, 0, nil, fmt.Errorf("name pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, 0, nil, errors.Join(fmt.Errorf("open pseudo-terminal /dev/pts/%d", n), err)
	}
	return master, mfd, slave, nil
}
