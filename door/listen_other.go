//go:build !linux

package door

import "net"

// deferAccept is a Linux socket option; elsewhere the listener is left as it is.
func deferAccept(net.Listener) {}
