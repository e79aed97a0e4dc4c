package netwall

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The setid filter as data: its instructions against testdata, and its
// verdicts, run in x/net/bpf's interpreter on seccomp_data built by hand.

func TestSetIDFilterGolden(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			abis, err := seccompABIs(goarch)
			if err != nil {
				t.Fatal(err)
			}
			insts, err := setIDFilter(abis)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bpf.Assemble(insts); err != nil {
				t.Fatalf("assemble: %v", err)
			}
			var b bytes.Buffer
			for i, in := range insts {
				fmt.Fprintf(&b, "%3d  %v\n", i, in)
			}
			path := filepath.Join("testdata", "seccomp-"+goarch+".golden")
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run 'go test ./carry/netwall -run TestSetIDFilterGolden -update' to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("the filter differs from %s:\n--- got\n%s\n--- want\n%s", path, b.Bytes(), want)
			}
		})
	}
}

// seccompData is struct seccomp_data for one call, laid out for x/net/bpf's
// interpreter: the kernel loads each 32-bit word in the machine's order, the
// interpreter in network order, so each word is written big-endian at the
// offset the kernel has it (an argument's low word first).
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

func TestSetIDFilterVerdicts(t *testing.T) {
	const allow, eperm, enosys, kill = retAllow, retEPERM, retENOSYS, retKill
	for _, goarch := range []string{"amd64", "arm64"} {
		abis, _ := seccompABIs(goarch)
		insts, err := setIDFilter(abis)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(insts)
		if err != nil {
			t.Fatal(err)
		}
		verdict := func(arch, nr uint32, args ...uint64) uint32 {
			v, err := vm.Run(seccompData(arch, nr, args...))
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		for _, abi := range abis {
			nr := map[string]uint32{}
			for _, r := range abi.rules {
				nr[r.name] = r.nr
			}
			call := func(name string, args ...uint64) (uint32, bool) {
				n, ok := nr[name]
				if !ok {
					return 0, false
				}
				return verdict(abi.audit, n, args...), true
			}
			for _, c := range []struct {
				name string
				args []uint64
				want uint32
			}{
				{"chmod", []uint64{0, 0o4755}, eperm},
				{"chmod", []uint64{0, 0o2755}, eperm},
				{"chmod", []uint64{0, 0o755}, allow},
				{"chmod", []uint64{0, 0o1777}, allow}, // sticky is no privilege
				{"fchmod", []uint64{3, 0o6755}, eperm},
				{"fchmodat", []uint64{3, 0, 0o4700}, eperm},
				{"fchmodat", []uint64{3, 0, 0o700}, allow},
				{"fchmodat2", []uint64{3, 0, 0o4700, 0}, eperm},
				{"open", []uint64{0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, eperm},
				{"open", []uint64{0, unix.O_RDONLY, 0o4755}, allow}, // no file made: the mode is not used
				{"openat", []uint64{3, 0, unix.O_CREAT, 0o2644}, eperm},
				{"openat", []uint64{3, 0, oTmpfile | unix.O_RDWR, 0o4755}, eperm},
				{"openat", []uint64{3, 0, unix.O_CREAT | unix.O_TRUNC, 0o644}, allow},
				{"openat", []uint64{3, 0, unix.O_RDONLY, 0o7777}, allow},
				// The mode's upper bits are not the kernel's: the filter reads
				// the low word, as the kernel does.
				{"openat", []uint64{3, 0, unix.O_CREAT, 0xffffffff000001a4}, allow},
				{"creat", []uint64{0, 0o4755}, eperm},
				{"mkdir", []uint64{0, 0o2775}, eperm},
				{"mkdirat", []uint64{3, 0, 0o2775}, eperm},
				{"mkdirat", []uint64{3, 0, 0o775}, allow},
				{"mknod", []uint64{0, unix.S_IFREG | 0o4755, 0}, eperm},
				{"mknodat", []uint64{3, 0, unix.S_IFREG | 0o2755, 0}, eperm},
				{"mknodat", []uint64{3, 0, unix.S_IFIFO | 0o644, 0}, allow},
				{"openat2", []uint64{3, 0, 0, 24}, enosys},
				{"io_uring_setup", []uint64{8, 0}, enosys},
				{"add_key", []uint64{0, 0, 0, 0, 0xfffffffc}, enosys},
				{"request_key", []uint64{0, 0, 0, 0}, enosys},
				{"keyctl", []uint64{0, 0xfffffffd, 0}, enosys},
			} {
				got, ok := call(c.name, c.args...)
				if !ok {
					continue // the ABI has no such call (arm64 has no chmod)
				}
				if got != c.want {
					t.Errorf("%s abi %#x: %s(%#o) = %#x, want %#x", goarch, abi.audit, c.name, c.args, got, c.want)
				}
			}
			// Calls the filter does not know pass; so do the known ones of
			// other numbers.
			if got := verdict(abi.audit, 0, 0, 0o4755); got != allow && !strings.Contains(fmt.Sprint(abi.rules), " 0 ") {
				t.Errorf("%s abi %#x: call 0 = %#x, want allow", goarch, abi.audit, got)
			}
		}
		if goarch == "amd64" {
			if got := verdict(unix.AUDIT_ARCH_X86_64, x32Bit|90, 0, 0o4755); got != enosys {
				t.Errorf("x32 chmod = %#x, want ENOSYS", got)
			}
			if got := verdict(unix.AUDIT_ARCH_X86_64, x32Bit|1, 0, 0); got != enosys {
				t.Errorf("x32 write = %#x, want ENOSYS", got)
			}
		}
		if got := verdict(unix.AUDIT_ARCH_PPC64LE, 15, 0, 0o4755); got != kill {
			t.Errorf("%s: a call of another architecture = %#x, want kill", goarch, got)
		}
	}
}
