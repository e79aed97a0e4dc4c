//go:build !linux

package netwall

import (
	"context"
	"net/netip"
	"os"
	"syscall"

	"github.com/postern-dev/postern/door"
)

// Wall is only raised on Linux.
type Wall struct{}

// Raise is only available on Linux.
func Raise(ctx context.Context, spec Spec) (*Wall, error) { return nil, ErrUnsupported }

func (w *Wall) Listeners() door.Listeners       { return door.Listeners{} }
func (w *Wall) Pid() int                        { return 0 }
func (w *Wall) Start(ctx context.Context) error { return ErrUnsupported }
func (w *Wall) Signal(sig syscall.Signal) error { return ErrUnsupported }
func (w *Wall) Wait() (int, error)              { return -1, ErrUnsupported }
func (w *Wall) Close() error                    { return nil }
func (w *Wall) Ending() Ending                  { return Ending{} }
func (w *Wall) PidsLimit() string               { return "" }
func KeptInit(dir string) (string, error)       { return "", nil }
func Init(ctx context.Context, args []string, signals <-chan os.Signal, held <-chan struct{}) int {
	return 125
}
func ExecDropped(argv []string) error { return ErrUnsupported }

// RuleConfig is what the wall's nftables rules depend on.
type RuleConfig struct {
	Ports           []uint16
	TransparentPort uint16
	DNSPort         uint16
}

// Rules is only available on Linux.
func Rules(c RuleConfig) ([]byte, error) { return nil, ErrUnsupported }

// RunAddrs: no run is walled on this operating system.
func RunAddrs() []netip.Addr { return nil }

// LandlockStatus: Landlock is a Linux security module.
func LandlockStatus(ports []uint16) string { return "none: landlock is Linux only" }

// Remedy is only meaningful on Linux.
func Remedy(step string, err error) string { return "" }

// SetsUpItself: no wall is raised on this operating system.
func SetsUpItself() bool { return false }
