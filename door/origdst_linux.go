package door

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and, at level SOL_IPV6,
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h): both are 80.
const soOriginalDst = 80

// ErrNoOriginalDst means the connection was not redirected by the kernel, so it has
// no original destination.
var ErrNoOriginalDst = errors.New("connection has no original destination (not redirected by nftables)")

// OriginalDst reads the destination a redirected connection was addressed to before
// nftables sent it to the door.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := local != nil && local.IP.To4() == nil
	var (
		ap   netip.AddrPort
		serr error
	)
	cerr := rc.Control(func(fd uintptr) {
		if v6 {
			var sa unix.RawSockaddrInet6
			size := uint32(unsafe.Sizeof(sa))
			serr = getsockopt(int(fd), unix.SOL_IPV6, soOriginalDst, unsafe.Pointer(&sa), &size)
			if serr == nil {
				port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
				ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
			}
			return
		}
		var sa unix.RawSockaddrInet4
		size := uint32(unsafe.Sizeof(sa))
		serr = getsockopt(int(fd), unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), &size)
		if serr == nil {
			port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
			ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
		}
	})
	if cerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", cerr)
	}
	if serr != nil {
		if errors.Is(serr, unix.ENOENT) {
			return netip.AddrPort{}, ErrNoOriginalDst
		}
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", serr)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func getsockopt(fd, level, name int, val unsafe.Pointer, size *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name), uintptr(val), uintptr(unsafe.Pointer(size)), 0)
	if e != 0 {
		return e
	}
	return nil
}
