package door

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door/policy"
)

// errNoHead means the client sent nothing before its deadline.
var errNoHead = errors.New("client sent nothing")

// readHead reads a client's first bytes until classifyHead can say what they
// are. pre are bytes already read. With a zero firstBy the wait for the first
// byte is unbounded and holds no buffer (an idle server-speaks-first tunnel costs
// nothing here); once bytes arrive, the head must complete within peekTimeout.
func readHead(c net.Conn, pre []byte, firstBy time.Time) ([]byte, firstBytes, error) {
	var buf []byte
	if len(pre) == 0 && firstBy.IsZero() {
		first, err := readWhenReadable(c)
		if err != nil {
			return nil, firstBytes{}, err
		}
		buf = first
	} else {
		if len(pre) == 0 {
			c.SetReadDeadline(firstBy)
		}
		buf = make([]byte, len(pre), max(headBufSize, len(pre)))
		copy(buf, pre)
	}
	armed := !firstBy.IsZero() && len(pre) == 0
	defer func() {
		if armed {
			c.SetReadDeadline(time.Time{})
		}
	}()
	completeBy := time.Time{}
	for {
		if len(buf) > 0 {
			fb, err := classifyHead(buf)
			if !errors.Is(err, errShortHead) {
				return buf, fb, err
			}
			if len(buf) >= maxHead {
				return buf, fb, errHeadTooLarge
			}
			if completeBy.IsZero() {
				completeBy = time.Now().Add(peekTimeout)
				c.SetReadDeadline(completeBy)
				armed = true
			}
		}
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), maxHead))
			copy(nb, buf)
			buf = nb
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if n > 0 {
				continue // classify what came with the error first
			}
			if len(buf) == 0 {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return nil, firstBytes{}, errNoHead
				}
				return nil, firstBytes{}, err
			}
			fb, cerr := classifyHead(buf)
			if errors.Is(cerr, errShortHead) {
				return buf, fb, fmt.Errorf("incomplete %s head (%d bytes) after %s: %w", fb.kind, len(buf), peekTimeout, err)
			}
			return buf, fb, cerr
		}
	}
}

// headBufSize is the first read of a client's head; most TLS ClientHellos
// and HTTP heads fit.
const headBufSize = 2048

// waitReadable blocks until c has bytes to read (or is closed) without reading
// them, so no buffer is held while waiting.
func waitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil // the first Read will wait instead
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var one [1]byte
	return rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return !errors.Is(err, unix.EAGAIN)
	})
}

// readWhenReadable waits for c's first bytes holding no buffer, and reads
// them in the same call that finds them there (one syscall, no peek).
// It returns the bytes read (at least one), or an error (io.EOF when c ended
// first).
func readWhenReadable(c net.Conn) ([]byte, error) {
	rc, ok := rawConn(c)
	if !ok {
		if err := waitReadable(c); err != nil {
			return nil, err
		}
		buf := make([]byte, headBufSize)
		m, err := c.Read(buf)
		if m > 0 {
			return buf[:m], nil
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, err
	}
	var (
		buf  *[]byte
		m    int
		rerr error
	)
	err := rc.Read(func(fd uintptr) bool {
		buf = headBufs.Get().(*[]byte)
		for {
			m, rerr = unix.Read(int(fd), *buf)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			// Nothing yet: give the buffer back before waiting.
			headBufs.Put(buf)
			buf = nil
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return nil, err
	case rerr != nil:
		return nil, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case m == 0:
		headBufs.Put(buf)
		return nil, io.EOF
	}
	return (*buf)[:m], nil
}

// headBufs hold a first read only while it is attempted: a buffer that took
// bytes goes with them to the caller, one that found none comes back.
var headBufs = sync.Pool{New: func() any { b := make([]byte, headBufSize); return &b }}

// rawConn is c's raw socket, when it has one.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	return rc, true
}

// headRules say what a connection's first bytes must show.
type headRules struct {
	// tlsOnly denies bytes that are not a TLS ClientHello (the transparent side
	// on 443).
	tlsOnly bool
	// httpOnly denies bytes that are not an HTTP/1.x request head (the
	// transparent side on 80): anything else there (HTTP/2's preface, a
	// lowercase method, TLS) would pass unread.
	httpOnly bool
	// inspected denies bytes that are neither TLS nor HTTP/1.x: the host's
	// requests are judged one by one, and opaque bytes would pass unread.
	inspected bool
}

// checkHead says why a connection admitted by j may not carry these first
// bytes, or "" when it may. The TLS server_name and the HTTP Host must name the
// admitted host; for an admitted literal address they must not name a host the
// policy denies.
func (d *Door) checkHead(j Judgement, fb firstBytes, herr error, rules headRules) string {
	if herr != nil {
		if errors.Is(herr, errNoHead) {
			return fmt.Sprintf("client sent no bytes within %s on port %d", peekTimeout, j.Port)
		}
		return fmt.Sprintf("%s: %v", fb.kind, herr)
	}
	switch fb.kind {
	case headOpaque:
		if rules.tlsOnly {
			return fmt.Sprintf("opaque (non-tls) traffic on port %d", j.Port)
		}
		if rules.httpOnly {
			return fmt.Sprintf("bytes that are not an http/1.x request on port %d", j.Port)
		}
		if rules.inspected {
			return fmt.Sprintf("bytes that are neither tls nor http/1.x to %s, whose requests the policy inspects", hostString(j.Host))
		}
		return ""
	case headTLS:
		if rules.httpOnly {
			return fmt.Sprintf("tls on port %d, which carries plain http", j.Port)
		}
	case headHTTP:
	default:
		return "unreadable first bytes"
	}
	if fb.name == "" {
		return ""
	}
	what := "tls sni"
	var (
		h   policy.Host
		err error
	)
	if fb.kind == headHTTP {
		what = "http host"
		h, _, err = policy.SplitTarget(fb.name, j.Port)
	} else {
		h, err = policy.CanonicalHost(fb.name)
	}
	if err != nil {
		return fmt.Sprintf("%s %q is not a valid host: %v", what, fb.name, err)
	}
	if j.Host.Name != "" || h.Addr.IsValid() {
		if !sameHost(h, j.Host) {
			return fmt.Sprintf("%s %s does not match admitted host %s", what, hostString(h), hostString(j.Host))
		}
		return ""
	}
	// An address admitted on its own (by CIDR) naming a host: refuse the names
	// the policy denies outright.
	nd := d.policyOf(j).DecideName(h.Name, j.Port)
	if nd.Floor || (nd.Rule != "" && (nd.Verdict == policy.Deny || nd.WouldDeny)) {
		return fmt.Sprintf("%s %s names a host the policy denies (%s)", what, h.Name, nd.Reason)
	}
	return ""
}

// pipe relays between an admitted client and its upstream. Server bytes flow
// to the client at once (server-speaks-first protocols work); the client's
// first bytes are read and checked before any of them reach the upstream. It
// returns the bytes moved each way, and a deny reason if the first bytes were
// refused (then nothing of the client's reached the upstream).
//
// When the client's first bytes are an HTTP request and the server has not
// spoken, the connection is handed to onHTTP (if not nil) with those bytes,
// to be served request by request: a tunnel that stayed a byte pipe after its
// first request would let a later request on it name any host. A TLS
// ClientHello that onTLS (if not nil) claims for inspection goes to the
// function it returns; if the server spoke first, so that the connection
// cannot be taken back whole, both ends are closed and the function is called
// with a nil head, to record the refusal.
func (d *Door) pipe(client, upstream net.Conn, pre []byte, onHead func(firstBytes, error) (deny bool), onHTTP func(head []byte) (up, down int64), onTLS func(firstBytes) func(head []byte) (up, down int64)) (up, down int64, denied bool) {
	dp := startDownPump(client, upstream)

	head, fb, herr := readHead(client, pre, time.Time{})
	if head == nil && herr != nil && !errors.Is(herr, errNoHead) {
		// The client closed or failed before sending anything: pass that on.
		closeWrite(upstream)
		return 0, dp.wait(), false
	}
	if onHead(fb, herr) {
		client.Close()
		upstream.Close()
		return 0, dp.wait(), true
	}
	if onHTTP != nil && fb.kind == headHTTP && herr == nil && dp.stop() {
		up, down = onHTTP(head)
		return up, down, false
	}
	if onTLS != nil && fb.kind == headTLS && herr == nil {
		if inspect := onTLS(fb); inspect != nil {
			if !dp.stop() {
				client.Close()
				upstream.Close()
				down = dp.wait()
				inspect(nil)
				return 0, down, true
			}
			up, down = inspect(head)
			return up, down, false
		}
	}
	if _, err := upstream.Write(head); err != nil {
		client.Close()
		upstream.Close()
		return 0, dp.wait(), false
	}
	up = int64(len(head))
	head = nil
	up += pump(upstream, client)
	return up, dp.wait(), false
}

// downPump relays a tunnel's upstream to its client once the upstream has
// something to say. Until then it holds nothing, and stop can still take the
// upstream back for the caller.
type downPump struct {
	client, upstream net.Conn
	done             chan int64

	mu    sync.Mutex
	state int // downWaiting, downPumping or downStopped
}

const (
	downWaiting = iota
	downPumping
	downStopped
)

func startDownPump(client, upstream net.Conn) *downPump {
	dp := &downPump{client: client, upstream: upstream, done: make(chan int64, 1)}
	go dp.run()
	return dp
}

func (dp *downPump) run() {
	// An error here (the upstream ended, or failed) is the pump's to report,
	// unless stop interrupted the wait.
	waitReadable(dp.upstream)
	dp.mu.Lock()
	if dp.state == downStopped {
		dp.mu.Unlock()
		dp.done <- 0
		return
	}
	dp.state = downPumping
	dp.mu.Unlock()
	dp.done <- pump(dp.client, dp.upstream)
}

// wait returns the bytes the pump moved, once it has ended.
func (dp *downPump) wait() int64 { return <-dp.done }

// stop takes the upstream back if the server has not spoken yet, and reports
// whether it did; whatever the server sends afterwards stays unread.
func (dp *downPump) stop() bool {
	dp.mu.Lock()
	if dp.state != downWaiting {
		dp.mu.Unlock()
		return false
	}
	dp.state = downStopped
	dp.mu.Unlock()
	dp.upstream.SetReadDeadline(aLongTimeAgo)
	<-dp.done
	dp.upstream.SetReadDeadline(time.Time{})
	return true
}
