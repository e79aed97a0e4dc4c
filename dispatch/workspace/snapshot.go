package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The snapshot is a tar stream of the work tree's files that differ from
// HEAD, each as it is on disk: a regular file with its executable bit, a
// symbolic link as a link (never followed). A path deleted from the work
// tree is an empty entry with the PAX record paxDeleted.
const paxDeleted = "POSTERN.deleted"

// writeSnapshot writes the entries of root to w. A path that is no longer
// there is written as deleted; a directory (an untracked repository inside
// the work tree) is left out and named in skipped.
func writeSnapshot(root string, paths []string, w io.Writer) (skipped []string, err error) {
	tw := tar.NewWriter(w)
	for _, p := range paths {
		full := filepath.Join(root, filepath.FromSlash(p))
		st, err := os.Lstat(full)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrInvalid) || isNotDir(err):
			if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX,
				PAXRecords: map[string]string{paxDeleted: "1"}}); err != nil {
				return nil, err
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("snapshot %s: %w", full, err)
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", full, err)
			}
			if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		case st.Mode().IsRegular():
			mode := int64(0o644)
			if st.Mode()&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.Open(full)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", full, err)
			}
			if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: mode, Size: st.Size(), Format: tar.FormatPAX}); err != nil {
				f.Close()
				return nil, err
			}
			// The size is the one measured: a file that grows while it is
			// read is cut there, one that shrinks fails the snapshot.
			n, err := io.Copy(tw, io.LimitReader(f, st.Size()))
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", full, err)
			}
			if n != st.Size() {
				return nil, fmt.Errorf("snapshot %s: the file shrank while it was read (%d of %d bytes); run again", full, n, st.Size())
			}
		default:
			skipped = append(skipped, p)
		}
	}
	return skipped, tw.Close()
}

func isNotDir(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory")
}

// SnapshotError is a snapshot the agent will not lay over a work tree.
type SnapshotError struct {
	Path string
	Why  string
}

func (e *SnapshotError) Error() string {
	return fmt.Sprintf("snapshot entry %q: %s", e.Path, e.Why)
}

// maxSnapshotEntries bounds the entries of one snapshot.
const maxSnapshotEntries = 1 << 20

// applySnapshot lays the snapshot read from r over the work tree at root:
// deleted paths are removed, files and links written as they came. Every
// name must be a clean relative path inside root and outside .git; no entry
// is written through a symbolic link or into anything but a directory of
// the tree.
func applySnapshot(ctx context.Context, root string, r io.Reader) error {
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if n > maxSnapshotEntries {
			return fmt.Errorf("snapshot has more than %d entries", maxSnapshotEntries)
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read snapshot: %w", err)
		}
		if err := checkName(h.Name); err != nil {
			return err
		}
		for k := range h.PAXRecords {
			// A sparse entry is a few bytes that read as any size.
			if strings.HasPrefix(k, "GNU.sparse.") {
				return &SnapshotError{Path: h.Name, Why: "a sparse file, which a snapshot never holds"}
			}
		}
		full := filepath.Join(root, filepath.FromSlash(h.Name))
		if h.PAXRecords[paxDeleted] == "1" {
			real, err := realParents(root, h.Name)
			if err != nil {
				return err
			}
			if !real {
				continue // under a file or link: not in the tree, nothing to delete
			}
			if err := os.RemoveAll(full); err != nil {
				return fmt.Errorf("snapshot: remove %s: %w", h.Name, err)
			}
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
		case tar.TypeSymlink:
		default:
			return &SnapshotError{Path: h.Name, Why: fmt.Sprintf("type %q is neither a file nor a symbolic link", h.Typeflag)}
		}
		if err := makeParents(root, h.Name); err != nil {
			return err
		}
		if st, err := os.Lstat(full); err == nil {
			if st.IsDir() {
				err = os.RemoveAll(full)
			} else {
				err = os.Remove(full)
			}
			if err != nil {
				return fmt.Errorf("snapshot: replace %s: %w", h.Name, err)
			}
		}
		if h.Typeflag == tar.TypeSymlink {
			if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
				return &SnapshotError{Path: h.Name, Why: "a symbolic link with no target"}
			}
			if err := os.Symlink(h.Linkname, full); err != nil {
				return fmt.Errorf("snapshot: link %s: %w", h.Name, err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			mode = 0o755
		}
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscallNoFollow, mode)
		if err != nil {
			return fmt.Errorf("snapshot: write %s: %w", h.Name, err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("snapshot: write %s: %w", h.Name, err)
		}
		// The umask may have taken bits the person's file had.
		if err := os.Chmod(full, mode); err != nil {
			return fmt.Errorf("snapshot: mode of %s: %w", h.Name, err)
		}
	}
}

// checkName admits a clean, relative, slash-separated path that names
// something inside the work tree and not in its .git.
func checkName(name string) error {
	switch {
	case name == "" || strings.IndexByte(name, 0) >= 0:
		return &SnapshotError{Path: name, Why: "empty or with a NUL byte"}
	case strings.HasPrefix(name, "/"):
		return &SnapshotError{Path: name, Why: "an absolute path"}
	case path.Clean(name) != name || name == "." || name == ".." || strings.HasPrefix(name, "../"):
		return &SnapshotError{Path: name, Why: "not a clean path inside the work tree"}
	case strings.Contains(name, "\\") && os.PathSeparator == '\\':
		return &SnapshotError{Path: name, Why: "a backslash"}
	}
	for _, part := range strings.Split(name, "/") {
		if strings.EqualFold(part, ".git") {
			return &SnapshotError{Path: name, Why: "inside .git, which the snapshot never writes"}
		}
	}
	return nil
}

// realParents reports whether every parent of name under root is a real
// directory: a path under a file or a symbolic link is not in the tree (and
// nothing is ever removed through a link).
func realParents(root, name string) (bool, error) {
	dir := root
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		st, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("snapshot: %s: %w", name, err)
		}
		if !st.IsDir() {
			return false, nil
		}
	}
	return true, nil
}

// makeParents makes the directories above name, replacing a file or link
// that is in the way (the work tree has a directory there now).
func makeParents(root, name string) error {
	dir := root
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		st, err := os.Lstat(dir)
		switch {
		case err == nil && st.IsDir():
			continue
		case err == nil:
			if err := os.Remove(dir); err != nil {
				return fmt.Errorf("snapshot: replace %s with a directory: %w", dir, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("snapshot: %s: %w", dir, err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("snapshot: make %s: %w", dir, err)
		}
	}
	return nil
}
