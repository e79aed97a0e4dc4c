package door

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// deferAcceptSeconds is how long the kernel holds a proxy connection that has
// sent nothing before handing it to accept anyway.
const deferAcceptSeconds = 5

// deferAccept asks the kernel to hand the proxy listener's connections to
// accept only once the client has sent its request (TCP_DEFER_ACCEPT), so the
// door reads it without first waiting on an empty socket. Explicit-proxy
// clients always speak first. Best effort: a listener that is not a socket is
// left as it is.
func deferAccept(l net.Listener) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAcceptSeconds)
	})
}
