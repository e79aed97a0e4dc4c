package netwall

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The wall's refusals are logged to an nflog group before they are refused
// (see the filter chain), and the group's netlink socket, opened here inside
// the run's namespace, goes to the door with the listeners (door.Listeners
// WallLog). nflog groups belong to a network namespace, so every wall can use
// the same one.
const (
	wallLogGroup = 7
	// wallLogSnaplen is how much of a refused packet is copied: its IP and
	// transport headers are enough to say where it was going.
	wallLogSnaplen = 128
	// wallLogRate bounds the packets logged per second (a burst twice that):
	// beyond it they are still refused, only not recorded.
	wallLogRate = 100
)

// nfnetlink_log configuration (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulaCfgQThresh  = 5
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
)

// openWallLog opens a netlink socket bound to the wall's nflog group in the
// calling thread's network namespace, copying each logged packet's first
// wallLogSnaplen bytes. The socket is non-blocking, for the door's poller.
func openWallLog() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nflog socket: %w", err)
	}
	fail := func(what string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("nflog %s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	// A burst of refusals must fit while the door reads.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	if err := nflogConfig(fd, 1, nfulaCfgCmd, []byte{nfulnlCfgCmdBind}); err != nil {
		return fail("bind group", err)
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode[0:4], wallLogSnaplen)
	mode[4] = nfulnlCopyPacket
	if err := nflogConfig(fd, 2, nfulaCfgMode, mode); err != nil {
		return fail("copy mode", err)
	}
	// Each packet is sent at once: the default batches 100, or a second.
	one := binary.BigEndian.AppendUint32(nil, 1)
	if err := nflogConfig(fd, 3, nfulaCfgQThresh, one); err != nil {
		return fail("queue threshold", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fail("non-blocking", err)
	}
	return os.NewFile(uintptr(fd), "wall-log"), nil
}

// nflogConfig sends one configuration attribute for the wall's group and
// waits for the kernel's acknowledgement.
func nflogConfig(fd int, seq uint32, attr uint16, value []byte) error {
	alen := 4 + len(value)
	msgLen := 16 + 4 + (alen+3)&^3
	b := make([]byte, msgLen)
	binary.NativeEndian.PutUint32(b[0:4], uint32(msgLen))
	binary.NativeEndian.PutUint16(b[4:6], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(b[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	b[16] = unix.AF_UNSPEC
	b[17] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(b[18:20], wallLogGroup)
	binary.NativeEndian.PutUint16(b[20:22], uint16(alen))
	binary.NativeEndian.PutUint16(b[22:24], attr)
	copy(b[24:], value)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	reply := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, reply, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		r := reply[:n]
		for len(r) >= 16 {
			l := int(binary.NativeEndian.Uint32(r[0:4]))
			if l < 16 || l > len(r) {
				return fmt.Errorf("malformed netlink reply")
			}
			if binary.NativeEndian.Uint16(r[4:6]) == unix.NLMSG_ERROR && binary.NativeEndian.Uint32(r[8:12]) == seq && l >= 20 {
				if errno := int32(binary.NativeEndian.Uint32(r[16:20])); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
			r = r[min((l+3)&^3, len(r)):]
		}
	}
}
