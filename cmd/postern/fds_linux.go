package main

import (
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// keepInheritedFromChildren marks every descriptor above 2 close-on-exec, first
// thing: descriptors postern's caller left open (a shell's, a build tool's
// jobserver) are not postern's to pass on, and without this every process it
// starts — the wall's init, which holds them for the whole run, the door's
// helpers, an engine — would inherit them. postern's own descriptors are opened
// close-on-exec already, and what it hands a child on purpose is dup'd into
// place by exec, which clears the flag there.
func keepInheritedFromChildren() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}
