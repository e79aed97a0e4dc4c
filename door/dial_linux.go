package door

import (
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// connectInPlace starts the connection to ap on the dialer's fresh
// non-blocking socket with a raw connect(2), one the Go scheduler does not
// see as a system call, and leaves the rest of the dial to the net package.
//
// A connect(2) to a host on this machine or over a veth pair does the whole
// handshake inside the call (the peer's SYN-ACK is processed before it
// returns), and that can take longer than the 20 µs after which the runtime's
// monitor hands a P held by a thread in a system call to another thread. With
// one P (the door's default) a dial then moved the connection to a second
// thread and parked the first, a wake-up each way. Made raw, the call keeps
// its P; the net package's own connect(2) that follows finds the socket
// connected and returns at once, or, for a handshake still under way, waits
// for it as usual. The socket is non-blocking, so the raw call never sleeps.
// Measured side by side on a 2-core guest: 0–35 µs off the p50 of a CONNECT
// tunnel's setup, about 17 µs on average.
func connectInPlace(ap netip.AddrPort) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		var errno syscall.Errno
		err := c.Control(func(fd uintptr) {
			var (
				sa4 unix.RawSockaddrInet4
				sa6 unix.RawSockaddrInet6
				ptr unsafe.Pointer
				n   uintptr
			)
			port := ap.Port()
			if network == "tcp4" {
				sa4.Family = unix.AF_INET
				sa4.Addr = ap.Addr().Unmap().As4()
				p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
				p[0], p[1] = byte(port>>8), byte(port)
				ptr, n = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
			} else {
				sa6.Family = unix.AF_INET6
				sa6.Addr = ap.Addr().As16()
				p := (*[2]byte)(unsafe.Pointer(&sa6.Port))
				p[0], p[1] = byte(port>>8), byte(port)
				ptr, n = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
			}
			_, _, errno = unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(ptr), n)
		})
		if err != nil {
			return err
		}
		switch errno {
		case 0, unix.EINPROGRESS, unix.EINTR:
			return nil
		default:
			return os.NewSyscallError("connect", errno)
		}
	}
}
