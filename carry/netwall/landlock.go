package netwall

import (
	"slices"
	"strconv"
	"strings"
)

// LandlockEnv, in a walled command's environment, asks the exec stage to confine
// the command with Landlock as well: TCP connect(2) only to the listed ports
// (comma-separated). The exec stage removes it before exec. It can only take
// rights away, so a command that sets it for its own children loses nothing.
const LandlockEnv = "POSTERN_LANDLOCK_CONNECT_TCP"

// LandlockConnectEnv is the LandlockEnv entry allowing TCP connect to ports and
// to DNS (53). Inside the wall connect(2) sees the port the command asked for,
// before the wall's redirect, so these are the policy's ports.
func LandlockConnectEnv(ports []uint16) string {
	all := append([]uint16{53}, ports...)
	slices.Sort(all)
	all = slices.Compact(all)
	s := make([]string, len(all))
	for i, p := range all {
		s[i] = strconv.Itoa(int(p))
	}
	return LandlockEnv + "=" + strings.Join(s, ",")
}
