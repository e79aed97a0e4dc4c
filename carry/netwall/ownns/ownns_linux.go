package ownns

// Nothing but what package syscall needs besides: package strings or bytes
// would have this initialised after package unicode, and so after most of
// postern's.
import (
	"strconv"
	"syscall"
	"unsafe"

	"github.com/postern-dev/postern/internal/kernel"
)

// trailerMagic opens the trailer internal/wallimage writes after the Go
// init attached to postern: magic (16 bytes), the image's length (8), its
// SHA-256 (32), 8 bytes of zero.
const (
	trailerMagic = "postern wallinit"
	trailerSize  = 16 + 8 + 32 + 8
	sumAt        = 24
)

// oPath is O_PATH, which package syscall does not name: the same on every
// Linux architecture Go builds for.
const oPath = 0x200000

// Enter execs the small pid 1 kept for this binary in its launch mode,
// which execs postern again, with the same arguments, in a user namespace
// of its own. In a postern so launched, it removes the mark and empties
// every thread's inheritable and ambient capabilities (see dropCarried).
//
// Elsewhere it returns, having changed nothing: a command other than a run
// on this machine without a terminal (RunsWallHere); root, which needs
// none; real and effective ids that differ (a setuid install), which could
// not both be mapped; a binary with cgo, whose threads could not all drop
// what the launch carried; POSTERN_WALL_INIT=go; a kernel before 6.18,
// whose /proc cannot be mounted for the run by postern; AppArmor's
// restriction of unprivileged user namespaces; no small pid 1 kept yet
// (measuring the machine keeps it for the build, as does any run).
//
// It must come before anything marks a descriptor close-on-exec: the exec
// keeps everything the caller passed.
func Enter() {
	if _, launched := syscall.Getenv(Env); launched {
		_ = syscall.Unsetenv(Env)
		dropCarried()
		return
	}
	if syscall.Geteuid() == 0 || syscall.Getuid() != syscall.Geteuid() || syscall.Getgid() != syscall.Getegid() || withCgo {
		return
	}
	if v, _ := syscall.Getenv(InitEnv); v == "go" {
		return
	}
	args := cmdline()
	if !RunsWallHere(args) || stdinIsTerminal() || !kernel.AtLeast(6, 18) || userNamespacesConfined() {
		return
	}
	dir := InitDir()
	if dir == "" {
		return
	}
	pid1 := keptPid1(dir, "/proc/self/exe")
	if pid1 < 0 {
		return
	}
	self, err := syscall.Open("/proc/self/exe", oPath, 0) // not close-on-exec: the launch execs it
	if err != nil {
		syscall.Close(pid1)
		return
	}
	argv := append([]string{Pid1Prefix + "launch", LaunchArg, strconv.Itoa(self), strconv.FormatUint(Caps, 16), "--"}, args...)
	// Exec'd through the descriptor whose file was checked, not its path.
	_ = syscall.Exec("/proc/self/fd/"+strconv.Itoa(pid1), argv, append(syscall.Environ(), Env+"=1"))
	// Not exec'd: nothing was changed but the descriptors.
	syscall.Close(self)
	syscall.Close(pid1)
}

// dropCarried empties every thread's inheritable capabilities, and so its
// ambient ones, which the launch filled to carry them across its exec: a
// program postern starts (git, an editor) gets none of them, whatever its
// file capabilities. The effective and permitted sets stay; netwall raises
// the inheritable and ambient ones again on the thread that starts the
// run's pid 1. Every thread holds the same sets here, so one set of data
// fits them all. (Refused, ENOTSUP, in a binary with cgo, which is never
// launched.)
func dropCarried() {
	hdr := capHeader{version: linuxCapabilityVersion3}
	var data [2]capData
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return
	}
	data[0].inheritable, data[1].inheritable = 0, 0
	// One stop of every thread: the kernel keeps no ambient capability
	// that is not inheritable too (capset masks the ambient set).
	_, _, _ = syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// capHeader and capData are the kernel's for capget and capset
// (linux/capability.h), which package syscall does not name.
type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

const linuxCapabilityVersion3 = 0x20080522

// userNamespacesConfined says whether a user namespace made by a program
// without a profile of its own gets no capabilities in it
// (AppArmor's restriction of unprivileged user namespaces, Ubuntu 23.10 on):
// the launch would make one for nothing, where a profile given to postern
// (see netwall's remedies) lets postern's own clone of the Go init make one.
func userNamespacesConfined() bool {
	fd, err := syscall.Open("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var b [1]byte
	n, _ := syscall.Read(fd, b[:])
	return n == 1 && b[0] != '0'
}

// keptPid1 opens (O_PATH, close-on-exec) the small pid 1 kept in dir for
// the Go init attached to the executable exe, where it is there as netwall
// writes it: a regular file of this user's that no one else may write, in a
// directory of this user's that no one else may write. -1 otherwise, or
// where no init is attached.
func keptPid1(dir, exe string) int {
	sum := attachedSum(exe)
	if sum == "" {
		return -1
	}
	dfd, err := syscall.Open(dir, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	defer syscall.Close(dfd)
	if !ownedAlone(dfd, syscall.S_IFDIR) {
		return -1
	}
	fd, err := syscall.Openat(dfd, Pid1Prefix+sum, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	if !ownedAlone(fd, syscall.S_IFREG) {
		syscall.Close(fd)
		return -1
	}
	return fd
}

// ownedAlone says whether the file open on fd is of type typ, this user's,
// and written by no one else.
func ownedAlone(fd int, typ uint32) bool {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == typ && int(st.Uid) == syscall.Geteuid() && st.Mode&0o022 == 0 &&
		(typ != syscall.S_IFREG || st.Size > 0)
}

// attachedSum is the start of the SHA-256 of the Go init attached to the
// executable exe, in hexadecimal as netwall names the files it keeps; ""
// where none is attached.
func attachedSum(exe string) string {
	fd, err := syscall.Open(exe, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Size < trailerSize {
		return ""
	}
	var t [trailerSize]byte
	if n, err := syscall.Pread(fd, t[:], st.Size-trailerSize); err != nil || n != trailerSize {
		return ""
	}
	if string(t[:16]) != trailerMagic {
		return ""
	}
	const digits = "0123456789abcdef"
	var sum [20]byte
	for i, b := range t[sumAt : sumAt+10] {
		sum[2*i], sum[2*i+1] = digits[b>>4], digits[b&0xf]
	}
	return string(sum[:])
}

// cmdline is this process's arguments, as the kernel keeps them: package os
// is not initialised yet.
func cmdline() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	// NUL after each argument.
	var args []string
	for start, i := 0, 0; i < len(data); i++ {
		if data[i] == 0 {
			args = append(args, string(data[start:i]))
			start = i + 1
		}
	}
	return args
}

// stdinIsTerminal says whether standard input is a terminal, which gives
// the run a terminal of its own, relayed by the Go init: no gain there.
func stdinIsTerminal() bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
