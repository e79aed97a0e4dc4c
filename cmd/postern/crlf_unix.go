//go:build linux || darwin

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// outputRaw reports whether f is a terminal that does not turn LF into CRLF
// on output (raw mode clears OPOST).
func outputRaw(f *os.File) bool {
	t, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	if err != nil {
		return false // not a terminal
	}
	return t.Oflag&unix.OPOST == 0 || t.Oflag&unix.ONLCR == 0
}
