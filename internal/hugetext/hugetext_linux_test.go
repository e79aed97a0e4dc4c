package hugetext

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

const smapsText = `00400000-00c00000 r-xp 00000000 fe:00 1234    /usr/bin/postern
Size:               8192 kB
FilePmdMapped:      6144 kB
VmFlags: rd ex mr mw me hg
00c00000-00e00000 r--p 00800000 fe:00 1234    /usr/bin/postern
Size:               2048 kB
FilePmdMapped:      2048 kB
VmFlags: rd mr mw me
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
FilePmdMapped:         0 kB
`

func TestPmdMappedSumsEachMapping(t *testing.T) {
	if got, want := pmdMapped(smapsText), int64(8192<<10); got != want {
		t.Fatalf("pmdMapped = %d, want %d", got, want)
	}
	if got := pmdMapped("FilePmdMapped: x kB\nFilePmdMapped: 4\n"); got != 0 {
		t.Fatalf("malformed lines counted: %d", got)
	}
}

func TestMappingIsOneMappingsLines(t *testing.T) {
	m := mapping(smapsText, 0xc00000)
	if got, want := pmdMapped(m), int64(2048<<10); got != want {
		t.Fatalf("mapping at 0xc00000 holds %d in huge pages, want %d:\n%s", got, want, m)
	}
	if got, want := pmdMapped(mapping(smapsText, 0x400000)), int64(6144<<10); got != want {
		t.Fatalf("first mapping: %d, want %d", got, want)
	}
	if m := mapping(smapsText, 0x500000); m != "" {
		t.Fatalf("no mapping starts at 0x500000, got %q", m)
	}
}

// A file written here and primed: the priming reads it whole and changes
// none of it. On a kernel and file system that give huge page-cache folios
// (ext4 from Linux 6.16, xfs), all of its whole 2 MiB ranges are held.
func TestPrimeFileReadsItWhole(t *testing.T) {
	data := make([]byte, 7<<20)
	_, _ = rand.Read(data)
	p := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(p, data, 0o500); err != nil {
		t.Fatal(err)
	}
	held, err := PrimeFile(p)
	if err != nil {
		t.Fatalf("PrimeFile: %v", err)
	}
	if held < 0 || held > int64(len(data)) {
		t.Fatalf("held %d of a %d-byte file", held, len(data))
	}
	t.Logf("held in huge pages: %d of %d bytes (huge pages possible: %v)", held, len(data), Possible())
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file changed by its priming (err %v)", err)
	}
	if small, err := PrimeFile(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatalf("a missing file primed: %d", small)
	}
}

// The primer exits with the status the process it replaced was to exit
// with; arguments it was not given by Exit are its own error.
func TestMainReturnsTheStatusItWasGiven(t *testing.T) {
	p := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(p, make([]byte, 3<<20), 0o500); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{p, "0"}, 0},
		{[]string{p, "3"}, 3},
		{[]string{filepath.Join(t.TempDir(), "gone"), "7"}, 7},
		{[]string{p, "256"}, 2},
		{[]string{p, "-1"}, 2},
		{[]string{p}, 2},
	} {
		if got := Main(c.args); got != c.want {
			t.Errorf("Main(%q) = %d, want %d", c.args, got, c.want)
		}
	}
}
