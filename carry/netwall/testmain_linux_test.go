package netwall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Hidden entry points of the test binary, which Raise re-executes as Self.
const (
	testDialArg = "__test-dial" // dial network addr, print what happened
	testFdsArg  = "__test-fds"  // print the open descriptors, opening none
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case InitArg:
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
			os.Exit(Init(context.Background(), sigs))
		case ExecArg:
			err := ExecDropped(os.Args[2:])
			fmt.Fprintln(os.Stderr, "postern:", err)
			if errors.Is(err, ErrCommandNotFound) {
				os.Exit(127)
			}
			os.Exit(126)
		case testFdsArg:
			os.Exit(testFds())
		case testDialArg:
			os.Exit(testDial(os.Args[2], os.Args[3]))
		}
	}
	os.Exit(m.Run())
}

// testDial connects to addr and reports the outcome on stdout: "connected",
// "refused", "denied" or the error.
func testDial(network, addr string) int {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.Dial(network, addr)
	if err == nil && network == "udp" {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		_, err = c.Write([]byte("ping"))
		if err == nil {
			_, err = c.Read(make([]byte, 16))
		}
	}
	switch {
	case err == nil:
		fmt.Println("connected")
		c.Close()
		return 0
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Println("refused")
		return 1
	case errors.Is(err, syscall.EPERM):
		// A packet dropped on output fails the send itself.
		fmt.Println("denied")
		return 1
	default:
		fmt.Println("error:", err)
		return 2
	}
}

// testFds prints the descriptors the process inherited, found by asking the
// kernel about each number rather than by listing /proc/self/fd, which would
// add one. The Go runtime's own (its poller's) are close-on-exec; nothing
// that crossed exec is.
func testFds() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println(err)
		return 1
	}
	var open []string
	for fd := 0; fd < int(lim.Cur); fd++ {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			open = append(open, strconv.Itoa(fd))
		}
	}
	fmt.Println(strings.Join(open, " "))
	return 0
}
