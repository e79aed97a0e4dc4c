package agent

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"unsafe"

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
	name, err := ptsName(mfd)
	if err != nil {
		master.Close()
		return nil, 0, nil, err
	}
	slave, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, 0, nil, fmt.Errorf("open pseudo-terminal %s: %w", name, err)
	}
	return master, mfd, slave, nil
}

// ptsName grants and unlocks the slave of the pseudo-terminal master fd and
// returns its name, as grantpt, unlockpt and ptsname do.
func ptsName(fd int) (string, error) {
	if err := ioctl(fd, unix.TIOCPTYGRANT, 0); err != nil {
		return "", fmt.Errorf("grant pseudo-terminal: %w", err)
	}
	if err := ioctl(fd, unix.TIOCPTYUNLK, 0); err != nil {
		return "", fmt.Errorf("unlock pseudo-terminal: %w", err)
	}
	var name [128]byte
	if err := ioctl(fd, unix.TIOCPTYGNAME, uintptr(unsafe.Pointer(&name[0]))); err != nil {
		return "", fmt.Errorf("name pseudo-terminal: %w", err)
	}
	return string(name[:bytes.IndexByte(name[:], 0)]), nil
}

func ioctl(fd int, req uint, arg uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg); e != 0 {
		return syscall.Errno(e)
	}
	return nil
}
