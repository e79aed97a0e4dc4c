package netwall

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

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

// Under Landlock a connect to a port outside the policy's fails with EACCES
// before any packet; the wall hands it to the door through Refused, once per
// attempt, and one to an allowed port not at all. Raising and closing such
// walls leaves no goroutine or descriptor behind.
func TestWallHandsLandlockRefusalsToTheDoor(t *testing.T) {
	requireRoot(t)
	if connectPorts([]string{LandlockConnectEnv([]uint16{443})}) == nil {
		t.Fatal("no ports")
	}
	if !strings.HasPrefix(LandlockStatus([]uint16{443}), "abi ") || strings.Contains(LandlockStatus([]uint16{443}), "no network rules") {
		if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("Landlock has no network rules here (%s), and POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping the test of its refusals", LandlockStatus(nil))
		}
		t.Skipf("Landlock has no network rules here (%s): it refuses no connect to watch", LandlockStatus(nil))
	}
	// This test binary, where the run can execute it (see runTests).
	self := testExe
	env := append(os.Environ(), LandlockConnectEnv([]uint16{443}))
	var got []netip.AddrPort
	r := runSpec(t, Spec{Command: []string{self, testDialArg, "tcp", "192.0.2.1:8081"}, Ports: []uint16{443}, Env: env}, func(w *Wall) {
		for d := range w.Listeners().Refused {
			got = append(got, d)
		}
	})
	if !strings.Contains(r.stdout, "permission denied") {
		t.Fatalf("connect to 8081 under Landlock: %q", r.stdout)
	}
	if len(got) != 1 || got[0] != netip.MustParseAddrPort("192.0.2.1:8081") {
		t.Fatalf("refusals handed to the door: %v", got)
	}
	// An allowed port: redirected to the door, nothing refused.
	got = nil
	r = runSpec(t, Spec{Command: []string{self, testDialArg, "tcp", "192.0.2.1:443"}, Ports: []uint16{443}, Env: env}, func(w *Wall) {
		for d := range w.Listeners().Refused {
			got = append(got, d)
		}
	})
	if r.stdout != "connected" || len(got) != 0 {
		t.Fatalf("connect to 443: %q, refusals %v", r.stdout, got)
	}

	cycle := func() {
		w, err := Raise(context.Background(), Spec{Command: []string{self, testDialArg, "tcp", "192.0.2.1:8081"}, Ports: []uint16{443}, Env: env, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, _ = w.Wait()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	fds0, gr0 := openFDs(t), runtime.NumGoroutine()
	for range 20 {
		cycle()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > gr0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if gr := runtime.NumGoroutine(); gr > gr0 {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after\n%s", gr0, gr, buf[:runtime.Stack(buf, true)])
	}
	if fds := openFDs(t); len(fds) > len(fds0) {
		t.Fatalf("open descriptors: %d before, %d after: %v", len(fds0), len(fds), fds)
	}
}
