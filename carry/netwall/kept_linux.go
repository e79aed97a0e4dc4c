//go:build !postern_wallinit

package netwall

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/wallimage"
)

// keptPrefix starts the name of each init kept in an InitDir; the rest is
// the start of its SHA-256, so a build's init is never taken for another's.
const keptPrefix = "wall-init-"

// attached is the init attached to this binary, read once.
var attached = sync.OnceValues(func() (wallimage.Image, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return wallimage.Image{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return wallimage.Image{}, err
	}
	return wallimage.Find(f, st.Size())
})

// keptInit is the wall's init attached to this binary, as an executable of
// its own in dir: written there the first time, from this binary's own
// bytes and checked against the trailer's SHA-256, then used as it is while
// it is the file written (a regular file of this user's, of the image's
// length, that no one else may write). "" says this binary has none
// attached: the wall then re-executes Self.
//
// dir must be this user's own and out of every run's reach (the records'
// directory, which a run never sees, or the agents' directory on a remote
// machine, which it cannot write).
func keptInit(dir string) (string, error) {
	img, err := attached()
	if errors.Is(err, wallimage.ErrNone) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return keepAs(dir, keptPrefix, "/proc/self/exe", img)
}

// KeptInit is keptInit for callers outside the wall: the path of this
// binary's init kept in dir, written there if it is not yet, or "" where
// none is attached. The small pid 1 attached to it is kept beside it too,
// where a run of a user without privileges looks for it before postern has
// started (carry/netwall/ownns): a machine measured by this build has it
// for its first run.
func KeptInit(dir string) (string, error) {
	p, err := keptInit(dir)
	if err != nil || p == "" {
		return p, err
	}
	_, err = keptPid1(dir, p)
	return p, err
}

// keep is img of the executable exe, kept in dir (see keptInit).
func keep(dir, exe string, img wallimage.Image) (string, error) {
	return keepAs(dir, keptPrefix, exe, img)
}

// keepAs is keep for the files named prefix and the start of their
// SHA-256: the Go init's (keptPrefix) or the small pid 1's (pid1Prefix).
func keepAs(dir, prefix, exe string, img wallimage.Image) (string, error) {
	sum := hex.EncodeToString(img.Sum[:10])
	path := filepath.Join(dir, prefix+sum)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil && keptAsWritten(&st, img.Size) {
		return path, nil
	}
	if err := privateDir(dir); err != nil {
		return "", err
	}
	if err := writeKept(path, exe, img); err != nil {
		return "", err
	}
	pruneKept(dir, prefix, path)
	return path, nil
}

// keptBuilds is how many builds' inits a directory keeps: two installs of
// postern sharing one home each find theirs.
const keptBuilds = 3

// pruneKept removes the inits of earlier builds from dir, the newest
// keptBuilds (path among them) left. A run of one still going keeps its
// file until it ends.
func pruneKept(dir, prefix, path string) {
	paths, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil || len(paths) <= keptBuilds {
		return
	}
	type kept struct {
		path string
		mod  time.Time
	}
	var ks []kept
	for _, p := range paths {
		if st, err := os.Lstat(p); err == nil && p != path {
			ks = append(ks, kept{p, st.ModTime()})
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].mod.After(ks[j].mod) })
	for _, k := range ks[min(len(ks), keptBuilds-1):] {
		_ = os.Remove(k.path)
	}
}

// keptAsWritten says st is the file writeKept leaves: regular, this user's,
// size bytes, written by no one else.
func keptAsWritten(st *unix.Stat_t, size int64) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == os.Geteuid() &&
		st.Size == size && st.Mode&0o022 == 0
}

// privateDir makes dir (mode 0700) where it is missing and refuses one that
// is not this user's own directory, or that others may write.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a directory of this user's that only it may write", dir)
	}
	return nil
}

// writeKept writes img from the executable exe to path: beside it first,
// synced and made read-only, then renamed into place, so no one ever
// executes a file half written, or one still open for writing here.
func writeKept(path, exe string, img wallimage.Image) error {
	self, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer self.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), io.NewSectionReader(self, img.Offset, img.Size)); err != nil {
		return fmt.Errorf("write the wall's init: %w", err)
	}
	if got := h.Sum(nil); string(got) != string(img.Sum[:]) {
		return fmt.Errorf("the wall's init attached to %s does not match its SHA-256", exe)
	}
	if err := tmp.Chmod(0o500); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	return nil
}
