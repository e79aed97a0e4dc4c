package door

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The door's dialer starts the connection itself (connectInPlace) and leaves
// the rest to the net package: a connection that completes inside connect(2),
// one refused, one that never completes, over IPv4 and IPv6.
func TestDialConnectsInPlace(t *testing.T) {
	checkNoLeaks(t)
	d, err := New(Config{Policy: mustPolicy(t, testPolicy), Emit: func(Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	echo := func(c net.Conn) { io.Copy(c, c) }
	v6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1]: %v", err)
	}
	targets := []netip.AddrPort{netip.MustParseAddrPort(server(t, echo)), netip.MustParseAddrPort(serveOn(t, v6, echo))}
	for _, ap := range targets {
		c, err := d.dial(context.Background(), ap)
		if err != nil {
			t.Fatalf("dial %s: %v", ap, err)
		}
		if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != ap {
			t.Errorf("dialled %s, connected to %s", ap, got)
		}
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo over %s: %q %v", ap, buf, err)
		}
		c.Close()
	}

	// A port with no listener: the refusal is the dial's error.
	closed := listen(t)
	port := closed.Addr().(*net.TCPAddr).AddrPort()
	closed.Close()
	if _, err := d.dial(context.Background(), port); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v, want connection refused", err)
	}

	// A listener whose accept queue is full drops SYNs, so the handshake is
	// still under way when connect(2) returns: the net package waits for it
	// and the context bounds the wait.
	full := fullListener(t)
	held, err := net.Dial("tcp", full.String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := d.dial(ctx, full)
	if err == nil {
		c.Close()
		t.Fatal("dial to a listener that drops SYNs connected")
	}
	// The net package gives up on the context or on the write deadline it
	// set from it, whichever it sees first.
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
	if took := time.Since(start); !timedOut || took < 250*time.Millisecond || took > 3*time.Second {
		t.Fatalf("dial to a listener that drops SYNs: %v after %v, want the 300ms deadline", err, took)
	}
}

// fullListener listens on loopback with an accept queue of one that nobody
// accepts from.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
}
