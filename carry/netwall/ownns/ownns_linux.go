package ownns

// Nothing but what package syscall needs besides: package strings or bytes
// would have this initialised after package unicode, and so after most of
// postern's.
import (
	"path"
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

// The kernel's numbers this file needs that package syscall does not name.
const (
	oPath                = 0x200000 // O_PATH, the same on every Linux architecture Go builds for
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
)

// Enter execs the small pid 1 kept for this binary in its launch mode,
// which execs postern again, with the same arguments, in a user namespace
// of its own. It returns, having changed nothing, where that does not
// apply: a command other than a run on this machine without a terminal,
// root (which needs none), a process already launched (whose mark it
// removes, and whose threads it has drop the ambient capabilities the
// launch gave them), POSTERN_WALL_INIT=go, a kernel before 6.18 (whose
// /proc cannot be mounted for the run by postern), no small pid 1 kept yet
// (the first run of a build keeps it; the ones after use it).
//
// It must come before anything marks a descriptor close-on-exec: the exec
// keeps everything the caller passed.
func Enter() {
	if _, launched := syscall.Getenv(Env); launched {
		_ = syscall.Unsetenv(Env)
		dropAmbient()
		return
	}
	if syscall.Geteuid() == 0 {
		return
	}
	if v, _ := syscall.Getenv(InitEnv); v == "go" {
		return
	}
	args := cmdline()
	if !RunsWallHere(args) || stdinIsTerminal() || !kernel.AtLeast(6, 18) {
		return
	}
	dir := InitDir()
	if dir == "" {
		return
	}
	pid1 := keptPid1(dir, "/proc/self/exe")
	if pid1 == "" {
		return
	}
	self, err := syscall.Open("/proc/self/exe", oPath, 0) // not close-on-exec: the launch execs it
	if err != nil {
		return
	}
	argv := append([]string{pid1, LaunchArg, strconv.Itoa(self), strconv.FormatUint(Caps, 16), "--"}, args...)
	_ = syscall.Exec(pid1, argv, append(syscall.Environ(), Env+"=1"))
	// Not exec'd: nothing was changed but the descriptor.
	syscall.Close(self)
}

// dropAmbient empties every thread's ambient capabilities: a program postern
// starts (git, an editor) gets none of them. The effective and permitted
// sets stay; netwall raises the ambient ones again on the thread that
// clones the run's pid 1. Refused (ENOTSUP) in a binary with cgo, whose
// threads then keep them: they reach nothing of the host's either.
func dropAmbient() {
	_, _, _ = syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0)
}

// keptPid1 is the small pid 1 kept in dir for the Go init attached to the
// executable exe, where it is there as netwall writes it: a regular file of
// this user's that no one else may write, in a directory of this user's
// that no one else may write. "" otherwise, or where no init is attached.
func keptPid1(dir, exe string) string {
	sum := attachedSum(exe)
	if sum == "" {
		return ""
	}
	p := path.Join(dir, Pid1Prefix+sum)
	if !ownedAlone(p, syscall.S_IFREG) || !ownedAlone(dir, syscall.S_IFDIR) {
		return ""
	}
	return p
}

// ownedAlone says whether p is of type typ, this user's, and written by no
// one else.
func ownedAlone(p string, typ uint32) bool {
	var st syscall.Stat_t
	if syscall.Lstat(p, &st) != nil {
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
