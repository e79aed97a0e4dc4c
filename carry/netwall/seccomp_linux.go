package netwall

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// No file the run leaves on the host is setuid or setgid. The mounts it
// writes are nosuid inside the run, but the host sees the same files through
// its own mounts, where the bits would hold: a run as root that did
// 'cp /bin/sh ./s; chmod 4755 ./s' would leave a root shell for anyone. So
// the exec stage installs a seccomp filter, inherited by everything the
// command starts, that refuses with EPERM every call setting S_ISUID or
// S_ISGID: chmod, fchmod, fchmodat, fchmodat2, and the calls that create a
// file, directory or node with a mode (open and openat with O_CREAT or
// O_TMPFILE, creat, mkdir, mkdirat, mknod, mknodat). openat2, whose mode the
// filter cannot read, and io_uring_setup, whose operations bypass seccomp,
// answer ENOSYS, after which programs use the calls above. So do the kernel's
// keyrings (add_key, request_key, keyctl), which no namespace divides: a run
// of root with no user namespace of its own (see HoldsInitCaps) would reach
// root's own keyrings on the host, as a container's root would. The compat ABI
// (i386 on amd64, arm on arm64) is filtered with its own numbers; x32 calls
// answer ENOSYS.
//
// File capabilities (security.capability) need no filter: setting them needs
// CAP_SETFCAP, which the run does not have. Writing to a setuid file clears
// its bits, since the run lacks CAP_FSETID.
//
// The filter is built here from x/net/bpf's instructions rather than with a
// seccomp library: those filter one architecture and leave the compat ABI to
// their default action, which for a filter that refuses a few calls is allow.

// setIDBits are the mode bits no file of the run may get.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// oTmpfile is O_TMPFILE without O_DIRECTORY (__O_TMPFILE): the same on
// amd64, arm64, i386 and arm.
const oTmpfile = 0o20000000

// seccompRule is what the filter does with one system call: refuse it
// (mode < 0 and flags < 0), or refuse it when its mode argument has a setid
// bit (and, where flags >= 0, its flags argument creates a file).
type seccompRule struct {
	name  string
	nr    uint32
	flags int // argument holding open flags, or -1
	mode  int // argument holding the mode, or -1: refused with ENOSYS
}

// seccompABI is one architecture's numbering of the calls the filter knows.
type seccompABI struct {
	audit uint32
	x32   bool // the x32 ABI shares the audit arch: its calls answer ENOSYS
	rules []seccompRule
}

func setIDRules(n map[string]uint32) []seccompRule {
	spec := []struct {
		name        string
		flags, mode int
	}{
		{"chmod", -1, 1}, {"fchmod", -1, 1}, {"fchmodat", -1, 2}, {"fchmodat2", -1, 2},
		{"open", 1, 2}, {"openat", 2, 3}, {"creat", -1, 1},
		{"mkdir", -1, 1}, {"mkdirat", -1, 2}, {"mknod", -1, 1}, {"mknodat", -1, 2},
		{"openat2", -1, -1}, {"io_uring_setup", -1, -1},
		{"add_key", -1, -1}, {"request_key", -1, -1}, {"keyctl", -1, -1},
	}
	var out []seccompRule
	for _, s := range spec {
		nr, ok := n[s.name]
		if !ok {
			continue // this ABI has no such call
		}
		out = append(out, seccompRule{name: s.name, nr: nr, flags: s.flags, mode: s.mode})
	}
	return out
}

// The ABIs of the architectures postern is built for, from the kernel's
// syscall tables.
var (
	abiX86_64 = seccompABI{audit: unix.AUDIT_ARCH_X86_64, x32: true, rules: setIDRules(map[string]uint32{
		"chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "open": 2, "openat": 257, "creat": 85,
		"mkdir": 83, "mkdirat": 258, "mknod": 133, "mknodat": 259, "openat2": 437, "io_uring_setup": 425,
		"add_key": 248, "request_key": 249, "keyctl": 250})}
	abiI386 = seccompABI{audit: unix.AUDIT_ARCH_I386, rules: setIDRules(map[string]uint32{
		"chmod": 15, "fchmod": 94, "fchmodat": 306, "fchmodat2": 452, "open": 5, "openat": 295, "creat": 8,
		"mkdir": 39, "mkdirat": 296, "mknod": 14, "mknodat": 297, "openat2": 437, "io_uring_setup": 425,
		"add_key": 286, "request_key": 287, "keyctl": 288})}
	abiAArch64 = seccompABI{audit: unix.AUDIT_ARCH_AARCH64, rules: setIDRules(map[string]uint32{
		"fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56,
		"mkdirat": 34, "mknodat": 33, "openat2": 437, "io_uring_setup": 425,
		"add_key": 217, "request_key": 218, "keyctl": 219})}
	abiARM = seccompABI{audit: unix.AUDIT_ARCH_ARM, rules: setIDRules(map[string]uint32{
		"chmod": 15, "fchmod": 94, "fchmodat": 333, "fchmodat2": 452, "open": 5, "openat": 322, "creat": 8,
		"mkdir": 39, "mkdirat": 323, "mknod": 14, "mknodat": 324, "openat2": 437, "io_uring_setup": 425,
		"add_key": 309, "request_key": 310, "keyctl": 311})}
)

// seccompABIs are the native ABI and its compat ABI for goarch.
func seccompABIs(goarch string) ([]seccompABI, error) {
	switch goarch {
	case "amd64":
		return []seccompABI{abiX86_64, abiI386}, nil
	case "arm64":
		return []seccompABI{abiAArch64, abiARM}, nil
	}
	return nil, fmt.Errorf("no seccomp filter for %s", goarch)
}

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS

	offNr   = 0 // struct seccomp_data: nr, arch, instruction_pointer, args[6]
	offArch = 4
	x32Bit  = 0x40000000
)

// argLow is the offset of the low 32 bits of argument i (little endian).
func argLow(i int) uint32 { return uint32(16 + 8*i) }

// setIDFilter is the filter for abis: each ABI's block, then death for any
// other architecture (none other can call).
func setIDFilter(abis []seccompABI) ([]bpf.Instruction, error) {
	prog := []bpf.Instruction{bpf.LoadAbsolute{Off: offArch, Size: 4}}
	for _, abi := range abis {
		block := abiBlock(abi)
		if len(block) > 255 {
			return nil, fmt.Errorf("seccomp block of %d instructions", len(block))
		}
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: abi.audit, SkipFalse: uint8(len(block))})
		prog = append(prog, block...)
	}
	return append(prog, bpf.RetConstant{Val: retKill}), nil
}

// abiBlock judges a call of one ABI; it always returns.
func abiBlock(abi seccompABI) []bpf.Instruction {
	b := []bpf.Instruction{bpf.LoadAbsolute{Off: offNr, Size: 4}}
	if abi.x32 {
		b = append(b, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1}, bpf.RetConstant{Val: retENOSYS})
	}
	for _, r := range abi.rules {
		var body []bpf.Instruction
		switch {
		case r.mode < 0:
			body = []bpf.Instruction{bpf.RetConstant{Val: retENOSYS}}
		case r.flags < 0:
			body = []bpf.Instruction{
				bpf.LoadAbsolute{Off: argLow(r.mode), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: setIDBits, SkipFalse: 1},
				bpf.RetConstant{Val: retEPERM},
				bpf.RetConstant{Val: retAllow},
			}
		default:
			body = []bpf.Instruction{
				bpf.LoadAbsolute{Off: argLow(r.flags), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.O_CREAT | oTmpfile, SkipFalse: 3},
				bpf.LoadAbsolute{Off: argLow(r.mode), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: setIDBits, SkipFalse: 1},
				bpf.RetConstant{Val: retEPERM},
				bpf.RetConstant{Val: retAllow},
			}
		}
		b = append(b, bpf.JumpIf{Cond: bpf.JumpEqual, Val: r.nr, SkipFalse: uint8(len(body))})
		b = append(b, body...)
	}
	return append(b, bpf.RetConstant{Val: retAllow})
}

// applySetIDFilter installs the filter on the calling process (all its
// threads). no_new_privs must already be set.
func applySetIDFilter() error { return installSetIDFilter(unix.SECCOMP_FILTER_FLAG_TSYNC) }

// installSetIDFilter installs the filter with flags: on the calling thread
// alone with 0, on all of the process's threads with SECCOMP_FILTER_FLAG_TSYNC.
func installSetIDFilter(flags uintptr) error {
	filter, err := setIDProgram()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("install the seccomp filter refusing setuid and setgid files: %w", errno)
	}
	return nil
}

// setIDProgram is the filter refusing setuid and setgid files, assembled for
// this machine's system call ABIs.
func setIDProgram() ([]unix.SockFilter, error) {
	abis, err := seccompABIs(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	insts, err := setIDFilter(abis)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assemble the seccomp filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return filter, nil
}
