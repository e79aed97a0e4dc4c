package agent

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func writeAgentFile(t *testing.T, dir string, size int) string {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, "postern")
	if err := os.WriteFile(p, b, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHashCachedRemembersAndNoticesChanges(t *testing.T) {
	dir := t.TempDir()
	p := writeAgentFile(t, dir, 1<<20)
	want, err := fileHash(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := hashCached(p, fileKey{})
	if err != nil || got != want {
		t.Fatalf("first hash = %s, %v; want %s", got, err, want)
	}
	cache := filepath.Join(dir, HashCacheName)
	b, err := os.ReadFile(cache)
	if err != nil {
		t.Fatalf("no cache written: %v", err)
	}
	// The cache is used: a planted hash for the same state of the file is
	// what comes back.
	planted := strings.Repeat("ab", 32)
	if err := os.WriteFile(cache, []byte(strings.Replace(string(b), want, planted, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := hashCached(p, fileKey{}); got != planted {
		t.Fatalf("hash with a cache for the same file state = %s, want the cached %s", got, planted)
	}

	// Damaged in place (same size): read again.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("damaged!"), 4096)
	f.Close()
	want, _ = fileHash(p)
	if got, _ := hashCached(p, fileKey{}); got != want {
		t.Fatalf("hash after damage = %s, want %s", got, want)
	}
	// Truncated: read again.
	os.Truncate(p, 100)
	want, _ = fileHash(p)
	if got, _ := hashCached(p, fileKey{}); got != want {
		t.Fatalf("hash after truncation = %s, want %s", got, want)
	}
	// Replaced by a rename, as an install does: read again.
	other := writeAgentFile(t, t.TempDir(), 4096)
	if err := os.Rename(other, p); err != nil {
		t.Fatal(err)
	}
	want, _ = fileHash(p)
	if got, _ := hashCached(p, fileKey{}); got != want {
		t.Fatalf("hash after replacement = %s, want %s", got, want)
	}
	// A garbled cache is ignored.
	os.WriteFile(cache, []byte("v1 zz\n"), 0o600)
	if got, _ := hashCached(p, fileKey{}); got != want {
		t.Fatalf("hash with a garbled cache = %s, want %s", got, want)
	}
}

func TestHashCachedWantsTheRunningFile(t *testing.T) {
	p := writeAgentFile(t, t.TempDir(), 4096)
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	k := keyOf(&st)
	if _, err := hashCached(p, k); err != nil {
		t.Fatalf("hash of the expected file: %v", err)
	}
	k.Ino++
	if _, err := hashCached(p, k); err == nil {
		t.Fatal("a file other than the running one was hashed as if it were it")
	}
}

func TestHashCachedInAReadOnlyDirectory(t *testing.T) {
	dir := t.TempDir()
	p := writeAgentFile(t, dir, 4096)
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	want, _ := fileHash(p)
	if got, err := hashCached(p, fileKey{}); err != nil || got != want {
		t.Fatalf("hash in a read-only directory = %s, %v; want %s", got, err, want)
	}
}

func TestSelfHashCachedIsSelfHash(t *testing.T) {
	want, err := SelfHash()
	if err != nil {
		t.Fatal(err)
	}
	got, err := selfHashCached()
	if err != nil || got != want {
		t.Fatalf("selfHashCached = %s, %v; want %s", got, err, want)
	}
}

func FuzzParseHashCache(f *testing.F) {
	f.Add([]byte(formatHashCache(strings.Repeat("0f", 32), fileKey{Dev: 2049, Ino: 1234, Size: 17 << 20, Mtime: 1e18, Ctime: 1e18 + 5})))
	f.Add([]byte("v1 " + strings.Repeat("AB", 32) + " 1 2 3 4 5\n"))
	f.Add([]byte("v2 x 1 2 3 4 5"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, k, ok := parseHashCache(b)
		if !ok {
			return
		}
		// What parses is a well-formed line that says the same again.
		h2, k2, ok2 := parseHashCache([]byte(formatHashCache(h, k)))
		if !ok2 || h2 != h || k2 != k {
			t.Fatalf("round trip of %q: %q %+v %v", b, h2, k2, ok2)
		}
		if len(h) != 64 || strings.ToLower(h) != h {
			t.Fatalf("parsed hash %q", h)
		}
	})
}
