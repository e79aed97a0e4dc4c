package netwall

import (
	"fmt"
	"strings"
	"testing"
)

// idMapLine reads what the kernel writes in /proc/PID/gid_map, as fmt.Sscan
// of three ints did.
func TestIDMapLine(t *testing.T) {
	for _, tc := range []struct {
		line       string
		in, out, n int
		ok         bool
	}{
		{"         0          0 4294967295", 0, 0, 4294967295, true},
		{"      1000       1000          1", 1000, 1000, 1, true},
		{"0 100000 65536", 0, 100000, 65536, true},
		{"", 0, 0, 0, false},
		{"0 0", 0, 0, 0, false},
		{"0 0 1 2", 0, 0, 0, false},
		{"a b c", 0, 0, 0, false},
		{"-1 0 1", 0, 0, 0, false},
		{"0 0 4294967296", 0, 0, 0, false},
	} {
		in, out, n, ok := idMapLine(tc.line)
		if ok != tc.ok || in != tc.in || out != tc.out || n != tc.n {
			t.Errorf("idMapLine(%q) = %d %d %d %v, want %d %d %d %v", tc.line, in, out, n, ok, tc.in, tc.out, tc.n, tc.ok)
		}
	}
}

func FuzzIDMapLine(f *testing.F) {
	for _, s := range []string{"         0          0 4294967295", "1000 1000 1", "", "0 0", "\t1\t2\t3", "+1 2 3", "01 02 03"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		in, out, n, ok := idMapLine(line)
		if !ok {
			return
		}
		// What it accepts, fmt.Sscan reads the same, but where a number
		// has leading zeros, which Sscan takes for octal and the kernel
		// never writes (it pads with spaces).
		octal := false
		for _, f := range strings.Fields(line) {
			octal = octal || len(f) > 1 && f[0] == '0'
		}
		var a, b, c int
		if _, err := fmt.Sscan(line, &a, &b, &c); !octal && (err != nil || a != in || b != out || c != n) {
			t.Fatalf("idMapLine(%q) = %d %d %d; Sscan %d %d %d %v", line, in, out, n, a, b, c, err)
		}
		if in < 0 || out < 0 || n < 0 || in > 1<<32-1 || out > 1<<32-1 || n > 1<<32-1 {
			t.Fatalf("idMapLine(%q) = %d %d %d: out of a map's range", line, in, out, n)
		}
	})
}
