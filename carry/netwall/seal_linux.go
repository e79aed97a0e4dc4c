package netwall

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procReadOnly are the parts of a fresh /proc that reach the whole kernel, not
// just the run: kernel settings, IRQ affinity, the sysrq trigger.
var procReadOnly = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}

// kernelMasked are files of the kernel's own that no namespace divides and
// that tell the run about the host: every user's keys and key quotas, the
// host's timers, tasks and interrupt counts (a timing side channel), its
// memory image, its hardware and firmware tables (owned by root, whom a run
// started by root is, capabilities or not), and the energy counters a power
// side channel reads. Each is covered by an empty, read-only file or
// directory, as a deny_read mask is.
var kernelMasked = []string{
	"/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/proc/latency_stats", "/proc/interrupts", "/proc/kcore", "/proc/acpi", "/proc/asound", "/proc/scsi",
	"/sys/firmware", "/sys/devices/virtual/powercap",
}

// kernelMounts are where the host mounts kernel filesystems under /sys that
// the run, which sees the host's tree, would otherwise read: debugfs (every
// task's scheduling, since Linux 5.13 what /proc/sched_debug was), tracefs
// (the host's trace buffers, which a read of trace_pipe also consumes),
// pstore (the kernel's logs from before the last crash), securityfs,
// configfs, bpffs (pinned programs and maps). Each is masked where something
// is mounted there; an empty directory is left as it is.
var kernelMounts = []string{
	"/sys/kernel/debug", "/sys/kernel/tracing", "/sys/fs/pstore", "/sys/kernel/security",
	"/sys/kernel/config", "/sys/fs/bpf",
}

// kernelMasks lists what of kernelMasked and kernelMounts is in the run's
// view to be masked. Each CPU's thermal_throttle counters, which some
// container runtimes mask too, are not: one mount per CPU would cost a large
// machine's every run milliseconds.
func kernelMasks() []string {
	out := slices.Clone(kernelMasked)
	for _, p := range kernelMounts {
		if mountRoot(p) {
			out = append(out, p)
		}
	}
	return out
}

// mountRoot says whether something is mounted at p; where the kernel cannot
// say (before Linux 5.8), whether p is there at all.
func mountRoot(p string) bool {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, 0, &st); err != nil {
		return false
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return true
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// sealHost makes every filesystem the run shares with the host read-only:
// every mount of the run's mount namespace, as it was copied from the host's,
// before anything of the run's covers one (so those a fresh /tmp, /run or
// /proc will cover are sealed too, not left writable beneath). The run's own
// mounts and the places it writes are added afterwards, over the sealed view
// (see sealKernel and applyLayout).
//
// When postern runs as root, the run's uid is the host's root: capabilities
// dropped, but owner of nearly every host file. Without this it could leave
// the wall through the host: a core_pattern of "|prog" is run by the kernel as
// root outside every namespace on the next crash, a file in /etc/cron.d runs
// outside within a minute, /sys/power/state suspends the machine, /dev/vda is
// the host's disk.
func sealHost() error {
	// One call for the whole tree where the kernel has it (Linux 5.12): it
	// also reaches mounts that others cover, which no path names.
	err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if err == nil {
		return nil
	}
	mounts, err := mountPoints()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := readOnly(m); err != nil {
			return err
		}
	}
	return nil
}

// sealKernel makes the kernel-wide parts of the run's fresh /proc read-only
// (/proc/sys, the sysrq trigger ...). The host's device nodes are not in the
// run's /dev (see ownDev).
func sealKernel() error {
	for _, p := range procReadOnly {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", p, err)
		}
		if err := readOnly(p); err != nil {
			return err
		}
	}
	return nil
}

// readOnly makes the mount at path read-only, keeping its other flags.
func readOnly(path string) error {
	err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.12: a bind remount must repeat the flags the mount
		// has, or the kernel refuses to drop a locked one.
		var st unix.Statfs_t
		if err = unix.Statfs(path, &st); err == nil {
			err = unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|remountFlags(st.Flags), "")
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EACCES), errors.Is(err, unix.EINVAL):
		// Gone, out of the user's reach, or overmounted: nothing the run can write through it.
		return nil
	}
	return fmt.Errorf("make %s read-only: %w", path, err)
}

// remountFlags turns statfs flags into the mount flags a remount must keep.
func remountFlags(f int64) uintptr {
	var out uintptr
	for _, m := range []struct {
		st int64
		ms uintptr
	}{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if f&m.st != 0 {
			out |= m.ms
		}
	}
	return out
}

// mountPoints lists the mount points of the calling thread's mount namespace,
// parents before children. The thread's, not the process's: a thread of
// postern's sets a run up in a mount namespace of its own (fast_linux.go).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := filepath.Clean(unescapeMount(fields[4]))
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
