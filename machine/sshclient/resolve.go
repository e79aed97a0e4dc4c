package sshclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/postern-dev/postern/machine"
)

// ErrUnresolved means an ssh destination names no host: no Host block of
// the ssh config gives it a HostName or a way to reach it, and it is not an
// address or a name that resolves.
var ErrUnresolved = errors.New("ssh destination resolves to nothing")

// Resolved is what the ssh configuration makes of a destination, as
// 'ssh -G' would: the host it connects to and how that was found.
type Resolved struct {
	Host machine.SSHHost
	// How says how the host was found: "ssh config" (a Host block gave it a
	// HostName), "proxy" (ProxyJump or ProxyCommand: the name is resolved
	// beyond it), "address" (an IP literal) or "dns".
	How string
	// Addrs are the addresses a name resolved to (How "dns").
	Addrs []string
}

// lookupTimeout bounds the name lookup of a destination that is no alias.
const lookupTimeout = 5 * time.Second

// ResolveDest says which host dest ([user@]host[:port] or an alias) reaches,
// by the ssh config in opts, without connecting. A name that no Host block
// maps elsewhere must resolve with r (nil: the system resolver); one that
// does not is ErrUnresolved, with the config file named in the fix.
func ResolveDest(ctx context.Context, dest string, opts Options, r *net.Resolver) (Resolved, error) {
	d, err := machine.ParseDest(dest)
	if err != nil {
		return Resolved{}, err
	}
	if opts.Home == "" {
		if opts.Home, err = os.UserHomeDir(); err != nil {
			return Resolved{}, fmt.Errorf("find home for ~/.ssh: %w", err)
		}
	}
	if opts.ConfigFile == "" {
		opts.ConfigFile = filepath.Join(opts.Home, ".ssh", "config")
	}
	cfg, err := machine.LoadSSHConfig(opts.ConfigFile, filepath.Join(opts.Home, ".ssh"))
	if err != nil {
		return Resolved{}, err
	}
	dl := &dialer{opts: opts, cfg: cfg}
	h := dl.resolve(d)
	res := Resolved{Host: h}
	switch {
	case h.ProxyJump != "" && !strings.EqualFold(h.ProxyJump, "none"),
		h.ProxyCommand != "" && !strings.EqualFold(h.ProxyCommand, "none"):
		res.How = "proxy"
		return res, nil
	case isAddress(h.HostName):
		res.How = "address"
		if !strings.EqualFold(h.HostName, d.Host) {
			res.How = "ssh config"
		}
		return res, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, lerr := r.LookupHost(lctx, h.HostName)
	if lerr == nil && len(addrs) > 0 {
		res.How, res.Addrs = "dns", addrs
		return res, nil
	}
	if !strings.EqualFold(h.HostName, d.Host) {
		return res, fmt.Errorf("%w: %s is HostName %s in %s, which does not resolve (%v); fix: correct its HostName there",
			ErrUnresolved, d.Host, h.HostName, opts.ConfigFile, lerr)
	}
	return res, fmt.Errorf("%w: %q is not a Host in %s and does not resolve as a name (%v); fix: add 'Host %s' with its HostName to %s, or give [user@]host[:port] of a host that resolves",
		ErrUnresolved, d.Host, opts.ConfigFile, lerr, d.Host, opts.ConfigFile)
}

func isAddress(s string) bool {
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	return err == nil
}
