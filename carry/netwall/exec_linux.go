package netwall

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Securebits (linux/securebits.h), all set and locked: uid 0 gains no
// capabilities on exec, and none can be raised again.
const (
	secbitNoroot                  = 1 << 0
	secbitNorootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7

	lockedSecurebits = secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
)

const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// ExecDropped is the wall's last stage: it drops every capability (bounding,
// ambient, inheritable, permitted, effective), locks the securebits, sets
// no_new_privs, refuses setuid and setgid files (see applySetIDFilter) and
// execs argv, looked up in the environment's PATH. It only
// returns on failure; errors.Is(err, ErrCommandNotFound) when argv[0] is not
// found (exit 127, as shells do), otherwise exit 126.
func ExecDropped(argv []string) error {
	if len(argv) == 0 {
		return errors.New("network wall: no command to run")
	}
	// Credentials are per thread: drop them on this one and exec from it.
	runtime.LockOSThread()

	path := argv[0]
	if !strings.Contains(path, "/") {
		if os.Getenv("PATH") == "" {
			os.Setenv("PATH", defaultPath)
		}
		p, err := exec.LookPath(path)
		if err != nil {
			return fmt.Errorf("%w: %q in PATH=%s", ErrCommandNotFound, path, os.Getenv("PATH"))
		}
		path = p
	}
	if err := dropPrivileges(); err != nil {
		return err
	}
	if err := applyLandlock(); err != nil {
		return err
	}
	if err := applySetIDFilter(); err != nil {
		return err
	}
	if err := closeInherited(); err != nil {
		return err
	}
	err := syscall.Exec(path, argv, os.Environ())
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: %s", ErrCommandNotFound, path)
	}
	return fmt.Errorf("exec %s: %w", path, err)
}

func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0); err != nil {
		return fmt.Errorf("lock securebits: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	var got [2]unix.CapUserData
	if err := unix.Capget(&hdr, &got[0]); err != nil {
		return fmt.Errorf("read capabilities back: %w", err)
	}
	if got != none {
		return fmt.Errorf("capabilities remain after dropping them: %+v", got)
	}
	return nil
}

// closeInherited marks every descriptor above 2 close-on-exec: the command gets
// its stdin, stdout and stderr, nothing else. A descriptor postern's caller
// left open would otherwise reach it through the init, and one of a host
// directory opens that directory's mount as the host has it, writable,
// past the run's read-only view.
func closeInherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close inherited descriptors: %w", err)
	}
	// Before Linux 5.11.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("close inherited descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("close inherited descriptor %d: %w", fd, err)
		}
	}
	return nil
}
