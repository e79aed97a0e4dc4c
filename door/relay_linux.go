package door

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// maxSplice is the most one splice(2) call moves, and the size asked of each
// pipe (the default /proc/sys/fs/pipe-max-size).
const maxSplice = 1 << 20

// splicePipe is a pipe's read and write ends.
type splicePipe struct{ r, w int }

// pipePool hands out empty pipes. A pipe is taken only while bytes are in
// flight and given back empty.
type pipePool struct {
	mu   sync.Mutex
	free []splicePipe
}

var pipes pipePool

func (pp *pipePool) get() (splicePipe, error) {
	pp.mu.Lock()
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free = pp.free[:n-1]
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return splicePipe{}, err
	}
	// Best effort: a bigger pipe moves more per call; the kernel may refuse.
	unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, maxSplice)
	return splicePipe{r: fds[0], w: fds[1]}, nil
}

// put returns an empty pipe.
func (pp *pipePool) put(p splicePipe) {
	pp.mu.Lock()
	if len(pp.free) < maxFreePipes {
		pp.free = append(pp.free, p)
		pp.mu.Unlock()
		return
	}
	pp.mu.Unlock()
	p.close()
}

func (p splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// spliceRelay moves src to dst with splice(2) when both are TCP sockets. The
// pipe is taken when the source has bytes and given back once it is drained
// and the source would block, so a waiting direction holds no descriptor.
// handled is false when the caller must go on copying with a buffer (not two
// TCP sockets, splice unsupported, or no pipe to be had); then no byte read
// from src is left unwritten.
func spliceRelay(dst, src net.Conn) (written int64, handled bool, err error) {
	s, ok := src.(*net.TCPConn)
	if !ok {
		return 0, false, nil
	}
	d, ok := dst.(*net.TCPConn)
	if !ok {
		return 0, false, nil
	}
	srcRC, err := s.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	dstRC, err := d.SyscallConn()
	if err != nil {
		return 0, false, nil
	}

	var (
		p        splicePipe
		havePipe bool
		inPipe   int
		eof      bool
		noPipe   bool // no pipe could be had: go on with a buffer
		opErr    error
	)
	defer func() {
		if !havePipe {
			return
		}
		if inPipe > 0 {
			p.close() // bytes left in it: never hand it to another tunnel
		} else {
			pipes.put(p)
		}
	}()
	fill := func(fd uintptr) bool {
		if !havePipe {
			var gerr error
			if p, gerr = pipes.get(); gerr != nil {
				noPipe = true
				return true
			}
			havePipe = true
		}
		for {
			n, err := unix.Splice(int(fd), nil, p.w, nil, maxSplice, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				// Nothing to read: give the empty pipe back, then wait.
				pipes.put(p)
				havePipe = false
				return false
			case err != nil:
				opErr = err
			case n == 0:
				eof = true
			default:
				inPipe = int(n)
			}
			return true
		}
	}
	drain := func(fd uintptr) bool {
		for inPipe > 0 {
			n, err := unix.Splice(p.r, nil, int(fd), nil, inPipe, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return false
			case err != nil:
				opErr = err
				return true
			}
			inPipe -= int(n)
			written += int64(n)
		}
		return true
	}
	for {
		if err := srcRC.Read(fill); err != nil {
			return written, true, err
		}
		switch {
		case noPipe:
			return written, false, nil
		case opErr == unix.EINVAL && written == 0:
			return 0, false, nil // splice not supported for these sockets
		case opErr != nil:
			return written, true, opErr
		case eof:
			return written, true, nil
		}
		if err := dstRC.Write(drain); err != nil {
			return written, true, err
		}
		if opErr != nil {
			return written, true, opErr
		}
	}
}
