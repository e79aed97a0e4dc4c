//go:build !linux

package door

import "net"

// spliceRelay is Linux only; elsewhere relay copies through a pooled buffer.
func spliceRelay(dst, src net.Conn) (int64, bool, error) { return 0, false, nil }
