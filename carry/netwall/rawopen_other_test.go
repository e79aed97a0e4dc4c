//go:build linux && !amd64

package netwall

import "golang.org/x/sys/unix"

// rawOpen is openat where the architecture has no open system call.
func rawOpen(path string, flags int, mode uint32) error {
	fd, err := unix.Open(path, flags, mode)
	if err == nil {
		unix.Close(fd)
	}
	return err
}
