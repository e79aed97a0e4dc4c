//go:build linux

package netwall

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawOpen is the open system call itself, which amd64 has beside openat.
func rawOpen(path string, flags int, mode uint32) error {
	_, _, e := unix.Syscall(unix.SYS_OPEN, uintptr(unsafe.Pointer(cstr(path))), uintptr(flags), uintptr(mode))
	return errnoErr(e)
}
