package main

import (
	"context"
	"fmt"
	"github.com/postern-dev/postern/machine/sshclient"
	"strings"
)

// checkConnect connects and logs in to dest, then hangs up: 'machine add --check'.
func checkConnect(ctx context.Context, dest string, opts sshclient.Options) error {
	c, err := sshclient.Dial(ctx, dest, opts)
	if err != nil {
		return err
	}
	return c.Close()
}

// resolvedText says how a destination was found, for 'machine add'.
func resolvedText(r sshclient.Resolved, checked bool) string {
	var s string
	switch r.How {
	case "proxy":
		s = fmt.Sprintf("%s through its proxy", r.Host.HostName)
	case "dns":
		s = fmt.Sprintf("%s at %s", r.Host.HostName, strings.Join(r.Addrs, ", "))
	default:
		s = r.Host.HostName
	}
	s = fmt.Sprintf("%s@%s port %d", r.Host.User, s, r.Host.Port)
	if checked {
		s += ", logged in"
	}
	return s
}
