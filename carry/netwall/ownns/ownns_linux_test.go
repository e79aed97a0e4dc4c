package ownns

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/postern-dev/postern/internal/wallimage"
)

// attachedSum reads the trailer internal/wallimage writes, and names the
// file netwall keeps (the start of the image's SHA-256).
func TestAttachedSumReadsWallimagesTrailer(t *testing.T) {
	dir := t.TempDir()
	exe, img := filepath.Join(dir, "postern"), filepath.Join(dir, "init")
	if err := os.WriteFile(exe, []byte("\x7fELF and the rest of a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := attachedSum(exe); got != "" {
		t.Errorf("a binary with nothing attached: %q", got)
	}
	image := []byte("the wall's init, an executable of its own")
	if err := os.WriteFile(img, image, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := wallimage.Attach(exe, img); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(image)
	if got, want := attachedSum(exe), hex.EncodeToString(sum[:10]); got != want {
		t.Errorf("attachedSum = %q, want %q", got, want)
	}
	if got := attachedSum(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("a missing binary: %q", got)
	}
}

// Only a small pid 1 this user keeps, that no one else may write, in a
// directory no one else may write, is exec'd.
func TestKeptPid1IsThisUsersAlone(t *testing.T) {
	dir := t.TempDir()
	exe, img := filepath.Join(dir, "postern"), filepath.Join(dir, "init")
	if err := os.WriteFile(exe, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, []byte("init"), 0o755); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "lib")
	if err := os.Mkdir(lib, 0o700); err != nil {
		t.Fatal(err)
	}
	kept := func() string {
		fd := keptPid1(lib, exe)
		if fd < 0 {
			return ""
		}
		defer syscall.Close(fd)
		p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := kept(); got != "" {
		t.Fatalf("no init attached: %q", got)
	}
	if err := wallimage.Attach(exe, img); err != nil {
		t.Fatal(err)
	}
	if got := kept(); got != "" {
		t.Fatalf("nothing kept yet: %q", got)
	}
	pid1 := filepath.Join(lib, Pid1Prefix+attachedSum(exe))
	if err := os.WriteFile(pid1, []byte("pid 1"), 0o500); err != nil {
		t.Fatal(err)
	}
	if got := kept(); got != pid1 {
		t.Fatalf("kept as netwall keeps it: %q, want %q", got, pid1)
	}
	for _, bad := range []struct {
		what string
		path string
		mode os.FileMode
	}{{"pid 1 others may write", pid1, 0o522}, {"a directory others may write", lib, 0o777}} {
		if err := os.Chmod(bad.path, bad.mode); err != nil {
			t.Fatal(err)
		}
		if got := kept(); got != "" {
			t.Errorf("%s: %q", bad.what, got)
		}
	}
	if err := os.Chmod(lib, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pid1); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(img, pid1); err != nil {
		t.Fatal(err)
	}
	if got := kept(); got != "" {
		t.Errorf("a link in pid 1's place: %q", got)
	}
}

func TestCmdlineIsTheArguments(t *testing.T) {
	if got := cmdline(); !slices.Equal(got, os.Args) {
		t.Errorf("cmdline() = %q, want %q", got, os.Args)
	}
}
