package ssh

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

func TestStatLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want os.FileMode
		size int64
		err  bool
	}{
		{"21103193 81c0 0 0 1796165941\n", 0o700, 21103193, false},          // GNU: regular, rwx------
		{"4096 41ed 1000 1000 1796165941", os.ModeDir | 0o755, 4096, false}, // a directory
		{"7 a1ff 0 0 1", os.ModeSymlink | 0o777, 7, false},
		{"10 89ed 0 0 1", os.ModeSetuid | 0o755, 10, false},
		{"sh: stat: not found", 0, 0, true},
		{"-1 81c0 0 0 1", 0, 0, true},
		{"1 zz 0 0 1", 0, 0, true},
	} {
		st, err := statLine(tc.in)
		if (err != nil) != tc.err {
			t.Fatalf("%q: err %v", tc.in, err)
		}
		if err == nil && (os.FileMode(st.Mode) != tc.want || st.Size != tc.size) {
			t.Fatalf("%q: mode %v size %d, want %v %d", tc.in, os.FileMode(st.Mode), st.Size, tc.want, tc.size)
		}
	}
	if _, err := statLine("missing\n"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func FuzzStatLine(f *testing.F) {
	f.Add("21103193 81c0 0 0 1796165941\n")
	f.Add("missing")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := statLine(s)
		if err == nil && st.Size < 0 {
			t.Fatalf("%q: negative size", s)
		}
	})
}
