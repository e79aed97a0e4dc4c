//go:build !linux

package door

import (
	"errors"
	"net"
	"net/netip"
)

// ErrNoOriginalDst means the connection was not redirected by the kernel.
var ErrNoOriginalDst = errors.New("original destinations are only read on Linux")

// OriginalDst is only available on Linux.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, ErrNoOriginalDst }
