package netwall

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/wire"
)

// controlFD is the init's descriptor of the control socket (ExtraFiles[0]).
const controlFD = 3

// The control channel between Raise (host side) and Init (inside the wall) is a
// unix stream socketpair. Each message is one frame of package wire, of type
// frameMessage, with a JSON body; file descriptors travel with a message's
// first byte (SCM_RIGHTS).

const (
	msgConfig  = "config"  // host -> init: what to run
	msgReady   = "ready"   // init -> host: namespaces set up; carries the listeners
	msgStart   = "start"   // host -> init: start the command
	msgStarted = "started" // init -> host: the command runs
	msgSignal  = "signal"  // host -> init: forward a signal to the command
	msgError   = "error"   // init -> host: a step failed
	msgEnded   = "ended"   // init -> host: the command ended; what became of its writes

	maxMessage = 16 << 20
	maxFDs     = 8

	frameMessage byte = 'J' // a frame carrying one message (encodeMessage)
)

type message struct {
	Type   string
	Config *initConfig
	Signal int
	Pid    int
	Err    *wireError
	Ending *Ending
	// Status is the command's exit status, sent with Ending once every
	// other process of the run has been reaped (the init is pid 1).
	Status *int
	// PidMaxErr, with ready, says why the init could not set its pid
	// namespace's pid_max (initConfig.PidMax); the host then holds the run
	// with a cgroup.
	PidMaxErr string
}

type initConfig struct {
	Command []string
	Dir     string
	Env     []string
	// netPlan reaches the init in its arguments, not on the control socket
	// (netArgs): it sets the network up from its start. encodeMessage
	// (codec_linux.go) leaves it out.
	netPlan
	TTY    bool
	Layout layout
	// PidMax, when set, is the pid_max the init gives the run's pid
	// namespace, which holds the run to its pids limit (pidMaxFor).
	PidMax int
	// NProc, when set, is the RLIMIT_NPROC the command starts with: the
	// run's pids limit where no cgroup holds it.
	NProc uint64
	// Trust and Hide are Spec.TrustPEM's files and Spec.Hide (trust_linux.go).
	Trust *trustFiles
	Hide  []string
}

// netPlan is the network part of the init's configuration: what it makes of
// the run's network namespace (configureNetns, or loopbackOnly).
type netPlan struct {
	Ports  []uint16
	AllTCP bool
	// NoNetwork: only lo, up, and nothing else: no routes, no listeners, no
	// rules (Spec.NoNetwork).
	NoNetwork bool
}

// netArgs are the init's arguments after InitArg, which hold its netPlan: the
// init sets the network up from its first instant, beside taking the rest of
// its configuration from the control socket. They are the run's to read
// (pid 1's /proc/PID/cmdline), and hold nothing but what the run meets at
// its first connect anyway.
func netArgs(p netPlan) []string {
	if p.NoNetwork {
		return []string{"--no-network"}
	}
	ports := make([]string, len(p.Ports))
	for i, port := range p.Ports {
		ports[i] = strconv.Itoa(int(port))
	}
	args := []string{"--ports=" + strings.Join(ports, ",")}
	if p.AllTCP {
		args = append(args, "--all-tcp")
	}
	return args
}

// parseNetArgs reads what netArgs wrote; anything else is refused.
func parseNetArgs(args []string) (netPlan, error) {
	var p netPlan
	seenPorts := false
	for _, a := range args {
		switch {
		case a == "--no-network" && !p.NoNetwork:
			p.NoNetwork = true
		case a == "--all-tcp" && !p.AllTCP:
			p.AllTCP = true
		case strings.HasPrefix(a, "--ports=") && !seenPorts:
			seenPorts = true
			list := strings.TrimPrefix(a, "--ports=")
			if list == "" {
				continue
			}
			for f := range strings.SplitSeq(list, ",") {
				n, err := strconv.ParseUint(f, 10, 16)
				if err != nil || n == 0 || f != strconv.FormatUint(n, 10) {
					return netPlan{}, fmt.Errorf("init argument %q: %q is not a port (1-65535)", a, f)
				}
				p.Ports = append(p.Ports, uint16(n))
			}
		default:
			return netPlan{}, fmt.Errorf("init argument %q: want --ports=P,P..., --all-tcp or --no-network, each once", a)
		}
	}
	switch {
	case p.NoNetwork && (seenPorts || p.AllTCP):
		return netPlan{}, errors.New("init arguments: --no-network with ports")
	case !p.NoNetwork && !seenPorts:
		return netPlan{}, errors.New("init arguments: neither --ports nor --no-network")
	}
	return p, nil
}

// wireError is a failed step as it crosses the channel; the host adds the remedy.
type wireError struct {
	Step    string
	Message string
	Errno   int
}

func stepError(step string, err error) *wireError {
	we := &wireError{Step: step, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		we.Errno = int(errno)
	}
	return we
}

type channel struct {
	conn *net.UnixConn
	wmu  sync.Mutex
	rmu  sync.Mutex
}

// newChannel takes ownership of f, a connected unix stream socket.
func newChannel(f *os.File) (*channel, error) {
	uc, err := unixConn(f, "control socket")
	if err != nil {
		return nil, err
	}
	return &channel{conn: uc}, nil
}

// unixConn takes ownership of f, a connected unix socket, as a conn of the
// net package's poller; what names it in errors.
func unixConn(f *os.File, what string) (*net.UnixConn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s: %T is not a unix socket", what, c)
	}
	return uc, nil
}

func (c *channel) send(m message, files ...*os.File) error {
	frame := wire.Append(nil, frameMessage, encodeMessage(m))
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, _, err := c.conn.WriteMsgUnix(frame, oob, nil)
	if err == nil && n < len(frame) {
		_, err = c.conn.Write(frame[n:])
	}
	// The descriptors must stay open until sendmsg has copied them.
	runtime.KeepAlive(files)
	if err != nil {
		return fmt.Errorf("send %s message: %w", m.Type, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it.
func (c *channel) recv() (message, []*os.File, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var m message
	hdr := make([]byte, wire.HeaderLen)
	oob := make([]byte, unix.CmsgSpace(4*maxFDs))
	n, oobn, flags, _, err := c.conn.ReadMsgUnix(hdr, oob)
	files, ferr := parseRights(oob[:oobn])
	if err == nil && n == 0 {
		err = io.EOF
	}
	if err == nil && ferr != nil {
		err = ferr
	}
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = errors.New("control message truncated: too many descriptors")
	}
	if err == nil && n < len(hdr) {
		_, err = io.ReadFull(c.conn, hdr[n:])
	}
	var body []byte
	if err == nil {
		t, size, herr := wire.ParseHeader(hdr, maxMessage)
		switch {
		case herr != nil:
			err = fmt.Errorf("control message of %d bytes exceeds %d", size, maxMessage)
		case t != frameMessage:
			err = fmt.Errorf("control frame of type %d, want %d", t, frameMessage)
		default:
			body = make([]byte, size)
			_, err = io.ReadFull(c.conn, body)
		}
	}
	if err == nil {
		m, err = decodeMessage(body)
	}
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return message{}, nil, err
	}
	return m, files, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for _, cm := range msgs {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "wall-fd"))
		}
	}
	return files, nil
}

func (c *channel) Close() error { return c.conn.Close() }
