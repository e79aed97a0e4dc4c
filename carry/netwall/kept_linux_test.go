package netwall

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/wallimage"
)

// attachedExe is a file with an init attached (see internal/wallimage), and
// the init's bytes.
func attachedExe(t *testing.T) (string, wallimage.Image, []byte) {
	t.Helper()
	dir := t.TempDir()
	exe, img := filepath.Join(dir, "postern"), filepath.Join(dir, "postern-wall")
	init := bytes.Repeat([]byte("#!init\n"), 4000)
	if err := os.WriteFile(exe, bytes.Repeat([]byte("binary"), 5000), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, init, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := wallimage.Attach(exe, img); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	found, err := wallimage.Find(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return exe, found, init
}

func TestKeepWritesTheInitOnceAndReadOnly(t *testing.T) {
	exe, img, want := attachedExe(t)
	dir := filepath.Join(t.TempDir(), "lib")
	p, err := keep(dir, exe, img)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), keptPrefix) {
		t.Fatalf("kept at %s, want %s/%s…", p, dir, keptPrefix)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the kept init is not the attached one (%d bytes, %v)", len(got), err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o500 {
		t.Fatalf("kept with mode %v, want r-x------", st.Mode().Perm())
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Fatalf("its directory has mode %v, want rwx------", dst.Mode().Perm())
	}
	// Used as it is the next time: not written again.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if p2, err := keep(dir, exe, img); err != nil || p2 != p {
		t.Fatalf("second keep: %s, %v", p2, err)
	}
	if st, _ := os.Stat(p); !st.ModTime().Equal(old) {
		t.Fatal("a kept init was written again")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestKeepReplacesWhatIsNotAsWritten(t *testing.T) {
	exe, img, want := attachedExe(t)
	for name, spoil := range map[string]func(p string){
		"short":            func(p string) { os.Chmod(p, 0o700); os.WriteFile(p, []byte("other"), 0o700) },
		"others may write": func(p string) { os.Chmod(p, 0o777) },
		"a link":           func(p string) { os.Remove(p); os.Symlink("/bin/sh", p) },
		"a directory":      func(p string) { os.Remove(p); os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := keep(dir, exe, img)
			if err != nil {
				t.Fatal(err)
			}
			spoil(p)
			if name == "a directory" {
				// Nothing renames over a directory: refused, and the
				// wall re-executes its own binary instead.
				if _, err := keep(dir, exe, img); err == nil {
					t.Fatal("kept over a directory")
				}
				return
			}
			if p2, err := keep(dir, exe, img); err != nil || p2 != p {
				t.Fatalf("keep after %s: %s, %v", name, p2, err)
			}
			got, err := os.ReadFile(p)
			st, _ := os.Lstat(p)
			if err != nil || !bytes.Equal(got, want) || !st.Mode().IsRegular() || st.Mode().Perm() != 0o500 {
				t.Fatalf("after %s the kept init is %v %d bytes (%v)", name, st.Mode(), len(got), err)
			}
		})
	}
}

func TestKeepRemovesEarlierBuildsInits(t *testing.T) {
	exe, img, _ := attachedExe(t)
	dir := t.TempDir()
	// Four earlier builds' inits, the oldest first.
	var stale []string
	for i := range 4 {
		p := filepath.Join(dir, keptPrefix+strings.Repeat(string(rune('a'+i)), 20))
		if err := os.WriteFile(p, []byte("an earlier build's init"), 0o500); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(p, when, when)
		stale = append(stale, p)
	}
	p, err := keep(dir, exe, img)
	if err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, keptPrefix+"*"))
	want := []string{stale[2], stale[3], p}
	if len(left) != keptBuilds || !slices.Contains(left, want[0]) || !slices.Contains(left, want[1]) || !slices.Contains(left, p) {
		t.Fatalf("left %v, want the newest two earlier ones and this build's: %v", left, want)
	}
	// Two builds taking turns with one home each keep theirs: neither
	// writes its init again.
	st, _ := os.Stat(stale[3])
	if _, err := keep(dir, exe, img); err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(stale[3]); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("another build's init went or changed: %v", err)
	}
}

func TestKeepRefusesADirectoryOthersMayWrite(t *testing.T) {
	exe, img, _ := attachedExe(t)
	dir := filepath.Join(t.TempDir(), "lib")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if _, err := keep(dir, exe, img); err == nil {
		t.Fatal("kept in a directory anyone may write")
	}
}

func TestKeepRefusesAnImageThatIsNotTheOneAttached(t *testing.T) {
	exe, img, _ := attachedExe(t)
	img.Sum[0] ^= 1
	dir := t.TempDir()
	if _, err := keep(dir, exe, img); err == nil {
		t.Fatal("kept an init whose SHA-256 is not the trailer's")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestKeptInitOfABinaryWithNoneAttached(t *testing.T) {
	// This test binary has no init attached: its walls re-execute it.
	p, err := keptInit(t.TempDir())
	if err != nil || p != "" {
		t.Fatalf("keptInit = %q, %v; want \"\", nil", p, err)
	}
}
