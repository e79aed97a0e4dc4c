package door

import (
	"bufio"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TCP_DEFER_ACCEPT is a Linux socket option: elsewhere the proxy listener is
// left as it is (listen_other.go), and there is nothing to test.
func TestProxyListenerDefersAccept(t *testing.T) {
	l := listen(t)
	runDoor(t, l, io.Discard)
	rc, err := l.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		var v int
		var gerr error
		rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		if v > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy listener has no TCP_DEFER_ACCEPT")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A client that takes its time before speaking is still served.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	io.WriteString(c, "CONNECT bad.a.test:443 HTTP/1.1\r\nHost: bad.a.test:443\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Fatalf("slow client: %q %v", status, err)
	}
}
