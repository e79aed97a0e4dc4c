package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HashCacheName is the file beside an installed agent that remembers the
// agent's hash, so that a warm start does not read the whole executable again.
// It names the file it describes by device, inode, size, modification and
// change time: a file written, truncated or replaced since no longer matches,
// and is hashed afresh. The cache guards against damage, not against someone
// who can write the agent's directory: they could replace the agent itself.
const HashCacheName = "postern.sha256"

// fileKey identifies one state of a file.
type fileKey struct {
	Dev, Ino           uint64
	Size, Mtime, Ctime int64
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{
		Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: st.Size,
		Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
	}
}

// hashCacheVersion starts every cache line; another version is not read.
const hashCacheVersion = "v1"

func formatHashCache(hash string, k fileKey) string {
	return fmt.Sprintf("%s %s %d %d %d %d %d\n", hashCacheVersion, hash, k.Dev, k.Ino, k.Size, k.Mtime, k.Ctime)
}

// parseHashCache reads a cache line; ok is false for anything else.
func parseHashCache(b []byte) (hash string, k fileKey, ok bool) {
	if len(b) > 256 {
		return "", fileKey{}, false
	}
	f := strings.Fields(string(b))
	if len(f) != 7 || f[0] != hashCacheVersion || len(f[1]) != 2*sha256.Size {
		return "", fileKey{}, false
	}
	if _, err := hex.DecodeString(f[1]); err != nil || strings.ToLower(f[1]) != f[1] {
		return "", fileKey{}, false
	}
	var u [2]uint64
	for i := range u {
		n, err := strconv.ParseUint(f[2+i], 10, 64)
		if err != nil {
			return "", fileKey{}, false
		}
		u[i] = n
	}
	var s [3]int64
	for i := range s {
		n, err := strconv.ParseInt(f[4+i], 10, 64)
		if err != nil {
			return "", fileKey{}, false
		}
		s[i] = n
	}
	return f[1], fileKey{Dev: u[0], Ino: u[1], Size: s[0], Mtime: s[1], Ctime: s[2]}, true
}

// SelfHash is the sha256 of the running executable, hex, read in full.
func SelfHash() (string, error) {
	return fileHash("/proc/self/exe")
}

// selfHashCached is SelfHash, remembered beside the executable (see
// HashCacheName) when the executable is still the file at its path.
func selfHashCached() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return SelfHash()
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		return SelfHash()
	}
	hash, err := hashCached(exe, keyOf(&self))
	if err != nil {
		return SelfHash()
	}
	return hash, nil
}

// hashCached hashes the file at path, through the cache beside it. want, if
// not zero, is the state the file must be in (the running executable's): a
// file at path in another state is an error.
func hashCached(path string, want fileKey) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	k := keyOf(&st)
	if want != (fileKey{}) && (k.Dev != want.Dev || k.Ino != want.Ino) {
		return "", fmt.Errorf("hash %s: it is not the running executable any more", path)
	}
	cache := filepath.Join(filepath.Dir(path), HashCacheName)
	if b, err := os.ReadFile(cache); err == nil {
		if h, ck, ok := parseHashCache(b); ok && ck == k {
			return h, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	hash := hex.EncodeToString(h.Sum(nil))
	// A file changed while it was read has another state now: cache nothing.
	var after unix.Stat_t
	if unix.Fstat(int(f.Fd()), &after) == nil && keyOf(&after) == k {
		writeHashCache(cache, formatHashCache(hash, k))
	}
	return hash, nil
}

// writeHashCache replaces the cache by a rename. It is best effort: an agent
// directory that cannot be written only costs the next start a full read.
func writeHashCache(path, line string) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".postern.sha256-*")
	if err != nil {
		return
	}
	_, werr := tmp.WriteString(line)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
