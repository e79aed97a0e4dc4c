package dispatch

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openTerminal makes the run's pseudo-terminal. keys is the person's terminal when
// stdin is one (nil when only output is); screen is where output goes.
func openTerminal(keys, screen *os.File) (*terminal, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal for the run: %w", err)
	}
	fd := int(master.Fd())
	var name [128]byte
	for _, step := range []struct {
		what string
		req  uint
		arg  uintptr
	}{
		{"grant", unix.TIOCPTYGRANT, 0},
		{"unlock", unix.TIOCPTYUNLK, 0},
		{"name", unix.TIOCPTYGNAME, uintptr(unsafe.Pointer(&name[0]))},
	} {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(step.req), step.arg); e != 0 {
			master.Close()
			return nil, fmt.Errorf("%s pseudo-terminal: %w", step.what, syscall.Errno(e))
		}
	}
	path := string(name[:bytes.IndexByte(name[:], 0)])
	slave, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open pseudo-terminal %s: %w", path, err)
	}
	t := &terminal{keys: keys, screen: screen, master: master, slave: slave}
	t.resize()
	return t, nil
}
