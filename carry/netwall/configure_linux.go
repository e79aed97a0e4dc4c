//go:build !postern_wallinit

package netwall

import (
	"fmt"
	"net"
	"os"

	"github.com/postern-dev/postern/door"
	"golang.org/x/sys/unix"
)

// Configure makes the network namespace of the calling OS thread a wall, as the
// wall's init does for its own: lo up with the run's addresses and default
// routes through it, the door's listeners opened inside, the nftables table
// redirecting ports and DNS to them. It is for a namespace made by someone
// else, such as a container's, entered with setns on a locked thread; the
// listeners stay usable from any thread afterwards. A step the kernel refuses
// returns a *KernelError naming the fix.
//
// allTCP sends TCP to every port to the door, as Spec.AllTCP does.
func Configure(ports []uint16, allTCP bool) (door.Listeners, error) {
	if _, err := normalisePorts(ports); err != nil {
		return door.Listeners{}, err
	}
	files, werr := configureNetns(ports, allTCP)
	if werr != nil {
		if kernelStep(werr.Step) {
			return door.Listeners{}, werr.kernelError(thisMachine())
		}
		return door.Listeners{}, fmt.Errorf("network wall: %s", werr.Message)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	return listenersFromFiles(files)
}

// listenersFromFiles turns the descriptors configureNetns returns (transparent,
// DNS UDP, DNS TCP, and the wall's log if there is one) into the door's
// listeners. The files stay the caller's.
func listenersFromFiles(files []*os.File) (door.Listeners, error) {
	if len(files) != 3 && len(files) != 4 {
		return door.Listeners{}, fmt.Errorf("network wall: %d listener descriptors, want 3 or 4", len(files))
	}
	var (
		lis door.Listeners
		err error
	)
	fail := func(what string, err error) (door.Listeners, error) {
		lis.Close()
		return door.Listeners{}, fmt.Errorf("network wall: %s listener: %w", what, err)
	}
	if lis.Transparent, err = net.FileListener(files[0]); err != nil {
		return fail("transparent", err)
	}
	if lis.DNSUDP, err = net.FilePacketConn(files[1]); err != nil {
		return fail("DNS UDP", err)
	}
	if lis.DNSTCP, err = net.FileListener(files[2]); err != nil {
		return fail("DNS TCP", err)
	}
	if len(files) == 4 {
		fd, err := unix.FcntlInt(files[3].Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fail("wall log", err)
		}
		lis.WallLog = os.NewFile(uintptr(fd), "wall-log")
	}
	return lis, nil
}
