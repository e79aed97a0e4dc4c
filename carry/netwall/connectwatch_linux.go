package netwall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Where Landlock confines the command's TCP connect(2) to the policy's ports
// (LandlockEnv), a connect to any other port fails with EACCES before a packet
// is made: the wall's nftables rules, which refuse and log such a connection
// otherwise, never see it, and nothing would be recorded. So the exec stage
// also installs a seccomp filter that hands each connect(2) of the command
// (and all it starts) to a supervisor on the host side, over a seccomp
// notification descriptor. The supervisor reads the destination, tells the
// door of one Landlock is about to refuse, and lets the call go on
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE): Landlock still decides, and refuses.
// The supervisor only watches; what it reads is recorded, never trusted for a
// decision. It is installed only where Landlock has network rules (ABI 4,
// Linux 6.7), which also has every call the watch needs (notifications that
// go on, 5.5; pidfd_getfd, 5.6).

// connectNotifyEnv names, in the exec stage's environment, the descriptor it
// sends its seccomp notification descriptor on.
const connectNotifyEnv = "POSTERN_CONNECT_NOTIFY_FD"

// connectNotifyFD is where the init puts that socket in the exec stage.
const connectNotifyFD = 3

// connectABI is the native architecture's audit number and connect(2).
func connectABI() (audit, nr uint32, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, unix.SYS_CONNECT, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, unix.SYS_CONNECT, true
	}
	return 0, 0, false
}

// connectFilter notifies on the native connect(2) and allows everything else:
// it decides nothing (the filter that refuses is applySetIDFilter's, and
// Landlock decides connects).
func connectFilter(audit, nr uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: audit, SkipFalse: 3},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF},
		bpf.RetConstant{Val: retAllow},
	}
}

// installConnectNotify, in the exec stage, installs connectFilter on this
// thread and sends its notification descriptor to the init, when the init
// gave a socket for it. A kernel without notifications is no error.
func installConnectNotify() error {
	v, ok := os.LookupEnv(connectNotifyEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(connectNotifyEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fmt.Errorf("bad %s %q", connectNotifyEnv, v)
	}
	defer unix.Close(fd)
	audit, nr, ok := connectABI()
	if !ok {
		return nil
	}
	if abi, err := llsys.LandlockGetABIVersion(); err != nil || abi < landlockNetABI {
		// Landlock refuses no connect here (the wall does, and records
		// it); and a kernel this old may not let a notified call go on.
		return nil
	}
	raw, err := bpf.Assemble(connectFilter(audit, nr))
	if err != nil {
		return fmt.Errorf("assemble the connect filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	lfd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return nil // no notifications here: Landlock's refusals go unrecorded
	}
	defer unix.Close(int(lfd))
	if err := unix.Sendmsg(fd, []byte{0}, unix.UnixRights(int(lfd)), nil, 0); err != nil {
		return fmt.Errorf("send the connect notifications to the init: %w", err)
	}
	return nil
}

// connectNotifyPair is the socket the init gives the exec stage for its
// notification descriptor: the init's end and the exec stage's.
func connectNotifyPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "connect-notify"), os.NewFile(uintptr(fds[1]), "connect-notify-exec"), nil
}

// recvConnectNotify takes the notification descriptor from the exec stage;
// nil when it sent none (it ended, or installed no filter).
func recvConnectNotify(f *os.File, wait time.Duration) *os.File {
	defer f.Close()
	_ = f.SetReadDeadline(time.Now().Add(wait))
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var got *os.File
	oob := make([]byte, unix.CmsgSpace(4))
	buf := make([]byte, 1)
	_ = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EAGAIN) {
			return false
		}
		if err != nil || n == 0 {
			return true
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return true
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, x := range fds {
				unix.Close(x)
			}
			return true
		}
		got = os.NewFile(uintptr(fds[0]), "seccomp-notify")
		return true
	})
	return got
}

// seccompNotif and seccompResp are struct seccomp_notif and
// seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// connectPorts are the TCP ports Landlock lets the command connect to, from
// the LandlockEnv entry of env; nil when Landlock confines nothing.
func connectPorts(env []string) map[uint16]bool {
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, LandlockEnv+"=")
		if !ok {
			continue
		}
		ports := map[uint16]bool{}
		for _, f := range strings.Split(v, ",") {
			if p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16); err == nil {
				ports[uint16(p)] = true
			}
		}
		return ports
	}
	return nil
}

// sockaddrDest reads an AF_INET or AF_INET6 sockaddr's destination (IPv4 in
// IPv6 unmapped); ok is false for any other family or a short one.
func sockaddrDest(b []byte) (netip.AddrPort, bool) {
	if len(b) < 2 {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
	case unix.AF_INET6:
		if len(b) < 24 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:4])), true
	}
	return netip.AddrPort{}, false
}

// watchConnects serves the notification descriptor until every process of
// the run is gone, or stop is closed (its write end): each connect goes on;
// one to a TCP port outside allowed is sent to out (dropped when out is
// full) before it does.
//
// Once it returns, the descriptor is closed, and the kernel fails every
// later connect(2) of the run with ENOSYS: a user-notification filter with
// no listener answers so. It returns only when no process of the run is
// left, when Close stops it after the run, or when the notification
// interface itself fails; a run that then cannot connect at all fails
// closed, where going on would leave its refusals unrecorded.
func watchConnects(f, stop *os.File, allowed map[uint16]bool, out chan<- netip.AddrPort) {
	defer close(out)
	defer f.Close()
	defer stop.Close()
	fd := int(f.Fd())
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, -1)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil || pfd[1].Revents != 0 {
			return
		}
		if pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && pfd[0].Revents&unix.POLLIN == 0 {
			return // no process of the run is left
		}
		var req seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
			if errno == unix.ENOENT || errno == unix.EINTR {
				continue // the caller went away
			}
			return
		}
		dest, refused := judgeConnect(&req, allowed)
		// What was read is the caller's only if the notification is still
		// pending: a caller gone meanwhile may have had its pid reused by
		// another process of the machine.
		if refused && !notifValid(fd, req.ID) {
			refused = false
		}
		resp := seccompResp{ID: req.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		if refused {
			select {
			case out <- dest:
			default:
			}
		}
	}
}

// notifValid says whether the notification id is still pending, its
// caller still in the notified call.
func notifValid(fd int, id uint64) bool {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return errno == 0
}

// judgeConnect reads a notified connect's destination from the caller and
// says whether Landlock will refuse it: a TCP socket, to a port outside
// allowed.
func judgeConnect(req *seccompNotif, allowed map[uint16]bool) (netip.AddrPort, bool) {
	pid := int(req.Pid)
	buf := make([]byte, min(req.Args[2], 28))
	if len(buf) < 8 {
		return netip.AddrPort{}, false
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(req.Args[1]), Len: len(buf)}}
	if n, err := unix.ProcessVMReadv(pid, local, remote, 0); err != nil || n < 8 {
		return netip.AddrPort{}, false
	}
	dest, ok := sockaddrDest(buf)
	if !ok || allowed[dest.Port()] {
		return netip.AddrPort{}, false
	}
	return dest, isTCPSocket(pid, int(req.Args[0]))
}

// isTCPSocket says whether descriptor fd of thread tid is a TCP socket (a
// UDP connect is not Landlock's to refuse).
func isTCPSocket(tid, fd int) bool {
	pidfd, err := unix.PidfdOpen(tid, 0)
	if err != nil {
		// A thread that is not its process's leader (EINVAL, or ENOENT on
		// some kernels): open its process.
		if tgid := threadGroup(tid); tgid > 0 && tgid != tid {
			pidfd, err = unix.PidfdOpen(tgid, 0)
		}
	}
	if err != nil {
		return false
	}
	defer unix.Close(pidfd)
	sock, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return false
	}
	defer unix.Close(sock)
	typ, err1 := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE)
	proto, err2 := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	return err1 == nil && err2 == nil && typ == unix.SOCK_STREAM && proto == unix.IPPROTO_TCP
}

func threadGroup(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
