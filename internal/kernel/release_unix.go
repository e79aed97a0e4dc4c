//go:build unix && !linux

package kernel

import "golang.org/x/sys/unix"

// Release is the running kernel's release (uname -r), or "" where it cannot
// be read.
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
