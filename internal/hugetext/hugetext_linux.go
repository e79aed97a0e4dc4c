// Package hugetext has postern's code held in the page cache as huge pages,
// where the kernel can: each later start of postern then maps its code and
// read-only data 2 MiB at a time rather than 4 KiB, and each exit unmaps a
// few entries rather than thousands. A walled run is a start and an exit of
// postern (15 MB, 14 MB of it mapped by its end), so this is paid on each.
//
// The kernel gives a file huge page-cache folios only when it reads a range
// it holds nothing of for a mapping marked MADV_HUGEPAGE (ext4 from Linux
// 6.16; xfs earlier), and keeps them until memory runs short. A running
// postern cannot re-read its own code that way, since what it runs is
// mapped and stays: the priming is done by another executable (the wall's
// init, which maps none of postern) into which postern turns at its exit
// (Exit), once a probe or a long run has asked for it (AtExit).
package hugetext

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const huge = 2 << 20

// Arg, as a primer's first argument, has it prime the executable named after
// it and then exit with the status after that (Main).
const Arg = "__prime-text"

// Held says whether any of this process's file mappings is mapped with huge
// pages: for a static binary, only its own executable's can be. What one
// priming could not hold (a range another process mapped then) stays as it
// was, so held in part counts as held.
func Held() bool {
	n, err := HeldBy("self")
	return err == nil && n > 0
}

// HeldBy is how much of process pid's file mappings ("self" for this one)
// is mapped with huge pages, in bytes.
func HeldBy(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		return 0, err
	}
	return pmdMapped(string(b)), nil
}

// pmdMapped is the sum of the FilePmdMapped lines of an smaps text, in bytes.
func pmdMapped(smaps string) int64 {
	var n int64
	for _, l := range strings.Split(smaps, "\n") {
		if v, ok := strings.CutPrefix(l, "FilePmdMapped:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				continue
			}
			if k, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				n += k << 10
			}
		}
	}
	return n
}

// Possible says whether this kernel may give a file huge page-cache folios
// at all: transparent huge pages not turned off.
func Possible() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !strings.Contains(string(b), "[never]")
}

// PrimeFile drops what no process maps of the file at path from the page
// cache (once it is written out), and reads it back through a mapping marked
// MADV_HUGEPAGE, aligned so that each 2 MiB of the file falls on a 2 MiB
// page. It returns how much of the file that mapping held in huge pages.
func PrimeFile(path string) (int64, error) {
	return readAligned(path, true)
}

// CachedHuge is how much of the file at path the page cache holds in huge
// pages already: what a mapping aligned as PrimeFile's gets in 2 MiB
// entries, read without dropping anything first.
func CachedHuge(path string) (int64, error) {
	return readAligned(path, false)
}

func readAligned(path string, drop bool) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := uintptr(st.Size())
	if size < huge {
		return 0, nil
	}
	if drop {
		// A file just written (an install a moment ago) is in pages the
		// kernel drops only once they are on disk.
		if err := f.Sync(); err != nil {
			return 0, err
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return 0, fmt.Errorf("fadvise POSIX_FADV_DONTNEED: %w", err)
		}
	}
	// An address range one huge page larger than the file, taken to have
	// an aligned start inside it, and the file mapped over it there.
	span := (size+huge-1)&^(huge-1) + huge
	res, err := unix.Mmap(-1, 0, int(span), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes: %w", span, err)
	}
	defer unix.Munmap(res)
	base := (uintptr(unsafe.Pointer(&res[0])) + huge - 1) &^ (huge - 1)
	addr, _, e := unix.Syscall6(unix.SYS_MMAP, base, size, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED, f.Fd(), 0)
	if e != 0 {
		return 0, fmt.Errorf("mmap %s: %w", path, e)
	}
	if err := madvise(addr, size, unix.MADV_HUGEPAGE); err != nil {
		return 0, fmt.Errorf("madvise MADV_HUGEPAGE: %w", err)
	}
	if err := madvise(addr, size, unix.MADV_POPULATE_READ); err != nil {
		return 0, fmt.Errorf("madvise MADV_POPULATE_READ: %w", err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	return pmdMapped(mapping(string(b), addr)), nil
}

// mapping is the part of an smaps text about the mapping that starts at addr.
func mapping(smaps string, addr uintptr) string {
	var b strings.Builder
	in := false
	for _, l := range strings.SplitAfter(smaps, "\n") {
		if start, ok := rangeStart(l); ok {
			in = start == uint64(addr)
		}
		if in {
			b.WriteString(l)
		}
	}
	return b.String()
}

// rangeStart is the start of the range that begins an smaps mapping's first
// line ("00400000-00c00000 r-xp …"); a field's line has none.
func rangeStart(line string) (uint64, bool) {
	f, _, _ := strings.Cut(line, " ")
	lo, hi, ok := strings.Cut(f, "-")
	if !ok {
		return 0, false
	}
	start, err := strconv.ParseUint(lo, 16, 64)
	if err != nil {
		return 0, false
	}
	_, err = strconv.ParseUint(hi, 16, 64)
	return start, err == nil
}

func madvise(start, length uintptr, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, length, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

var (
	mu     sync.Mutex
	primer string
)

// AtExit has Exit turn this process into primer (an executable of postern's
// own that maps none of postern), to prime postern's executable before the
// exit status is given, unless its code is held in huge pages already. The
// caller asks only where the kernel can (Possible). "" cancels.
func AtExit(path string) {
	mu.Lock()
	defer mu.Unlock()
	primer = path
}

// Exit ends the process with code: through the primer asked for by AtExit,
// which primes postern's executable and then exits with code, or at once.
// The primer's own file is primed first, here, where nothing maps it: the
// wall's init, started for every run, is that file, and its start takes
// fewer and cheaper page faults from a page cache read back in large pages
// (its code is under 2 MiB, too little for a huge page of its own).
// Where the primer cannot be executed the process exits as it would have.
func Exit(code int) {
	mu.Lock()
	p := primer
	mu.Unlock()
	if p != "" && !Held() {
		if exe, err := os.Readlink("/proc/self/exe"); err == nil && !strings.HasSuffix(exe, " (deleted)") {
			_, _ = PrimeFile(p)
			// Exec ends this process's other threads; the streams it
			// wrote are the kernel's already.
			_ = syscall.Exec(p, []string{p, Arg, exe, strconv.Itoa(code)}, os.Environ())
		}
	}
	os.Exit(code)
}

// Main is a primer's main, given the arguments after Arg: it primes the
// executable named first and returns the status named second. A priming
// that fails changes nothing and is not the caller's error.
func Main(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: "+Arg+" EXECUTABLE STATUS")
		return 2
	}
	code, err := strconv.Atoi(args[1])
	if err != nil || code < 0 || code > 255 {
		fmt.Fprintln(os.Stderr, "postern: "+Arg+": bad status", args[1])
		return 2
	}
	_, _ = PrimeFile(args[0])
	return code
}
