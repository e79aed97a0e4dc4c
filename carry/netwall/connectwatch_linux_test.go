package netwall

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func sockaddr4(a string, port uint16) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
	binary.BigEndian.PutUint16(b[2:4], port)
	ip := netip.MustParseAddr(a).As4()
	copy(b[4:8], ip[:])
	return b
}

func sockaddr6(a string, port uint16) []byte {
	b := make([]byte, 28)
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], port)
	ip := netip.MustParseAddr(a).As16()
	copy(b[8:24], ip[:])
	return b
}

func TestSockaddrDest(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want string
		ok   bool
	}{
		{sockaddr4("192.0.2.1", 8081), "192.0.2.1:8081", true},
		{sockaddr6("2001:db8::1", 22), "[2001:db8::1]:22", true},
		{sockaddr6("::ffff:192.0.2.9", 8080), "192.0.2.9:8080", true}, // IPv4 in IPv6, unmapped
		{sockaddr4("192.0.2.1", 80)[:6], "", false},
		{sockaddr6("2001:db8::1", 22)[:20], "", false},
		{[]byte{1, 0, '/', 't'}, "", false}, // AF_UNIX
	} {
		got, ok := sockaddrDest(tc.b)
		if ok != tc.ok || (ok && got.String() != tc.want) {
			t.Fatalf("%x: %v %v, want %s %v", tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestConnectPorts(t *testing.T) {
	got := connectPorts([]string{"PATH=/bin", LandlockConnectEnv([]uint16{443, 80})})
	if !got[53] || !got[80] || !got[443] || got[8080] {
		t.Fatalf("ports %v", got)
	}
	if connectPorts([]string{"PATH=/bin"}) != nil {
		t.Fatal("ports without Landlock")
	}
}

// The filter notifies on the native connect only, and allows every other
// call and architecture: it refuses nothing.
func TestConnectFilter(t *testing.T) {
	audit, nr, ok := connectABI()
	if !ok {
		t.Skip("no connect filter for this architecture")
	}
	vm, err := bpf.NewVM(connectFilter(audit, nr))
	if err != nil {
		t.Fatal(err)
	}
	data := func(nr, arch uint32) []byte {
		// x/net/bpf's VM loads words big-endian, where the kernel loads
		// seccomp_data in the machine's order.
		b := make([]byte, 64)
		binary.BigEndian.PutUint32(b[0:4], nr)
		binary.BigEndian.PutUint32(b[4:8], arch)
		return b
	}
	for _, tc := range []struct {
		nr, arch uint32
		want     uint32
	}{
		{nr, audit, unix.SECCOMP_RET_USER_NOTIF},
		{nr + 1, audit, retAllow},
		{nr, unix.AUDIT_ARCH_I386, retAllow},
	} {
		got, err := vm.Run(data(tc.nr, tc.arch))
		if err != nil || uint32(got) != tc.want {
			t.Fatalf("nr %d arch %#x: %#x %v, want %#x", tc.nr, tc.arch, got, err, tc.want)
		}
	}
}

func FuzzSockaddrDest(f *testing.F) {
	f.Add(sockaddr4("192.0.2.1", 8081))
	f.Add(sockaddr6("2001:db8::1", 22))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, ok := sockaddrDest(b); ok && !d.Addr().IsValid() {
			t.Fatalf("%x gave an invalid address", b)
		}
	})
}
