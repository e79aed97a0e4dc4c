package door

import (
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"
)

// Accept backoff, as net/http's server does: a failed accept that can pass
// (the door is out of descriptors, a client gave up mid-handshake) waits
// minAcceptDelay, doubling up to maxAcceptDelay, and the door keeps serving.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// passingAcceptErrnos are accept(2) errors that say nothing about the
// listener itself: resource exhaustion, and errors of one pending connection
// (Linux hands a new connection's pending network error to accept).
var passingAcceptErrnos = []syscall.Errno{
	syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EPROTO, syscall.EPERM,
	syscall.EINTR, syscall.EAGAIN, syscall.ETIMEDOUT,
	syscall.ENETDOWN, syscall.ENOPROTOOPT, syscall.EHOSTDOWN,
	syscall.EHOSTUNREACH, syscall.EOPNOTSUPP, syscall.ENETUNREACH,
}

// acceptErrorPasses reports whether an accept error is worth waiting out
// rather than ending the listener.
func acceptErrorPasses(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range passingAcceptErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// steadyListener rides out accept errors that pass, backing off and logging
// each, so running out of descriptors slows the door down instead of
// stopping it. Accept returns only a connection, an error that does not pass,
// or the last error once stop is closed.
type steadyListener struct {
	net.Listener
	what string
	log  *slog.Logger
	stop <-chan struct{}
}

func (l *steadyListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil || !acceptErrorPasses(err) {
			return c, err
		}
		if delay == 0 {
			delay = minAcceptDelay
		} else {
			delay = min(2*delay, maxAcceptDelay)
		}
		l.log.Warn("door accept failed, retrying",
			"listener", l.what, "addr", l.Addr().String(), "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-l.stop:
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}
