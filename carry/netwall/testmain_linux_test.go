package netwall

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/testhosts"
)

// Hidden entry points of the test binary, which Raise re-executes as Self.
const (
	testDialArg  = "__test-dial"  // dial network addr, print what happened
	testFdsArg   = "__test-fds"   // print the open descriptors, opening none
	testSetIDArg = "__test-setid" // DIR: try every way to make a setuid or setgid file there, print what happened
	testForkArg  = "__test-fork"  // N: start N sleeping children, print how many started and the processes there are
	testWrapArg  = "__test-wrap"  // N K: run N children one after another, then do as testForkArg K
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case InitArg:
			os.Exit(InitMain(os.Args[2:]))
		case ExecArg:
			err := ExecDropped(os.Args[2:])
			fmt.Fprintln(os.Stderr, "postern:", err)
			if errors.Is(err, ErrCommandNotFound) {
				os.Exit(127)
			}
			os.Exit(126)
		case testFdsArg:
			os.Exit(testFds())
		case testDialArg:
			os.Exit(testDial(os.Args[2], os.Args[3]))
		case testSetIDArg:
			os.Exit(testSetID(os.Args[2]))
		case testForkArg:
			n, _ := strconv.Atoi(os.Args[2])
			os.Exit(testFork(n))
		case testWrapArg:
			n, _ := strconv.Atoi(os.Args[2])
			k, _ := strconv.Atoi(os.Args[3])
			for range n {
				if pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{}); err == nil {
					var ws syscall.WaitStatus
					syscall.Wait4(pid, &ws, 0, nil)
				}
			}
			os.Exit(testFork(k))
		}
	}
	os.Exit(runTests(m))
}

// testExe is this test binary, at a path a run can execute (see runTests).
var testExe string

// placeSelf links (or, across filesystems, copies) this test binary into dir,
// written and closed before anything executes it.
func placeSelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(self))
	if os.Link(self, dst) == nil {
		return dst, nil
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, data, 0o755)
}

// runTests runs the package's tests with the small pid 1 built, so that the
// walls root raises are the ones a build with it raises (see fast_linux.go).
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "netwall-pid1-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The test binary where a run sees it: /proc/self/exe, in a run whose
	// pid 1 is not this binary, is pid 1's own.
	exeDir, err := os.MkdirTemp("/var/tmp", "netwall-exe-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(exeDir)
	if testExe, err = placeSelf(exeDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch err := testhosts.BuildPid1(filepath.Join(dir, "pid1")); {
	case errors.Is(err, testhosts.ErrNoCC):
		fmt.Fprintln(os.Stderr, "netwall: the walls start the Go init:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		pid1Path = filepath.Join(dir, "pid1")
	}
	return m.Run()
}

// testDial connects to addr and reports the outcome on stdout: "connected",
// "refused", "denied" or the error.
func testDial(network, addr string) int {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.Dial(network, addr)
	if err == nil && network == "udp" {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		_, err = c.Write([]byte("ping"))
		if err == nil {
			_, err = c.Read(make([]byte, 16))
		}
	}
	switch {
	case err == nil:
		fmt.Println("connected")
		c.Close()
		return 0
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Println("refused")
		return 1
	case errors.Is(err, syscall.EPERM):
		// A packet dropped on output fails the send itself.
		fmt.Println("denied")
		return 1
	default:
		fmt.Println("error:", err)
		return 2
	}
}

// testFds prints the descriptors the process inherited, found by asking the
// kernel about each number rather than by listing /proc/self/fd, which would
// add one. The Go runtime's own (its poller's) are close-on-exec; nothing
// that crossed exec is.
func testFds() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println(err)
		return 1
	}
	var open []string
	for fd := 0; fd < int(lim.Cur); fd++ {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			open = append(open, strconv.Itoa(fd))
		}
	}
	fmt.Println(strings.Join(open, " "))
	return 0
}

// testSetID tries, in dir, each system call that could leave a setuid or
// setgid file, and a file capability, printing "call: result" for each:
// "ok" or the errno's name.
func testSetID(dir string) int {
	res := func(err error) string {
		if err == nil {
			return "ok"
		}
		if errno, ok := err.(syscall.Errno); ok {
			return unix.ErrnoName(errno)
		}
		return err.Error()
	}
	p := func(name string) string { return dir + "/" + name }
	if err := os.WriteFile(p("plain"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		fmt.Println("setup:", err)
		return 1
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Println("setup:", err)
		return 1
	}
	fd, err := unix.Open(p("plain"), unix.O_RDONLY, 0)
	if err != nil {
		fmt.Println("setup:", err)
		return 1
	}
	try := []struct {
		name string
		call func() error
	}{
		{"chmod", func() error { return unix.Chmod(p("plain"), 0o4755) }},
		{"chmod-setgid", func() error { return unix.Chmod(p("plain"), 0o2755) }},
		{"fchmod", func() error { return unix.Fchmod(fd, 0o4755) }},
		{"fchmodat", func() error { return unix.Fchmodat(dfd, "plain", 0o6755, 0) }},
		{"fchmodat2", func() error {
			_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(dfd), uintptr(unsafe.Pointer(cstr("plain"))), 0o4755, 0, 0, 0)
			return errnoErr(e)
		}},
		{"open", func() error { return rawOpen(p("open"), unix.O_CREAT|unix.O_WRONLY, 0o4755) }},
		{"openat", func() error { _, err := unix.Openat(dfd, "openat", unix.O_CREAT|unix.O_WRONLY, 0o2755); return err }},
		{"openat-tmpfile", func() error { _, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_WRONLY, 0o4755); return err }},
		{"creat", func() error { _, err := unix.Creat(p("creat"), 0o4755); return err }},
		{"mkdir", func() error { return unix.Mkdir(p("mkdir"), 0o2755) }},
		{"mkdirat", func() error { return unix.Mkdirat(dfd, "mkdirat", 0o2755) }},
		{"mknod", func() error { return unix.Mknod(p("mknod"), unix.S_IFREG|0o4755, 0) }},
		{"mknodat", func() error { return unix.Mknodat(dfd, "mknodat", unix.S_IFREG|0o4755, 0) }},
		{"openat2", func() error {
			_, err := unix.Openat2(dfd, "openat2", &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY, Mode: 0o4755})
			return err
		}},
		{"io_uring_setup", func() error {
			params := make([]byte, 120)
			_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
			return errnoErr(e)
		}},
		{"setxattr-capability", func() error {
			// VFS_CAP_REVISION_2 with cap_setuid permitted and effective.
			v := []byte{0x01, 0x00, 0x00, 0x02, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
			return unix.Setxattr(p("plain"), "security.capability", v, 0)
		}},
		// What the run may do still works.
		{"chmod-plain", func() error { return unix.Chmod(p("plain"), 0o700) }},
		{"open-plain", func() error {
			fd, err := unix.Openat(dfd, "made", unix.O_CREAT|unix.O_WRONLY, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"open-nocreat-odd-mode", func() error {
			fd, err := unix.Openat(dfd, "made", unix.O_RDONLY, 0o4755)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"mkdir-plain", func() error { return unix.Mkdir(p("dir"), 0o755) }},
	}
	for _, t := range try {
		fmt.Printf("%s: %s\n", t.name, res(t.call()))
	}
	return 0
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func cstr(s string) *byte {
	b, _ := unix.BytePtrFromString(s)
	return b
}

// testFork starts n children that sleep, counting those the kernel let start,
// then counts the processes in its /proc (the run's pid namespace).
func testFork(n int) int {
	var pids []int
	for i := 0; i < n; i++ {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "30"}, &syscall.ProcAttr{})
		if err == nil {
			pids = append(pids, pid)
		}
	}
	ents, _ := os.ReadDir("/proc")
	procs := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			procs++
		}
	}
	fmt.Printf("started=%d procs=%d\n", len(pids), procs)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	return 0
}
