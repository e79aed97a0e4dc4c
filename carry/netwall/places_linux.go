package netwall

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// layout is what the init makes of the host's filesystems, planned on the
// host side before anything is spawned. Every path in it is absolute and as
// it really is (no symbolic link in it); the init opens each refusing links,
// so a path changed meanwhile fails the run rather than leading elsewhere.
type layout struct {
	// Home is overlaid with the run's private layer; "" is no home.
	Home string
	// Binds are written for real: the working directory or its work tree,
	// the writable places that exist; parents first.
	Binds []string
	// Git are the repository's git directories: overlaid too, with what a
	// commit writes bound for real and copied back.
	Git []gitPlace
	// Copies are writable places below Home (relative to it) that are files
	// or do not exist yet: what the run leaves there is copied back.
	Copies []string
	// ReadOnly are bound read-only over the places above; Masks are covered
	// with an empty read-only file or directory, last of all.
	ReadOnly []string
	Masks    []string
	// Keep is where the home's private layer is copied at the end.
	Keep string
}

// gitPlace is one git directory of the run's repository.
type gitPlace struct {
	Dir string
	// Bound are its subdirectories (of gitBound) bound for real: they existed.
	Bound []string
	// Index says this git directory holds the work tree's index; Gitlinks
	// are the submodules that index had before the run.
	Index    bool
	Gitlinks []string
}

// gitBound are the subdirectories of a git directory a commit writes into:
// its objects, its references and their logs. Git locks and renames inside
// them, so they are bound for real; what a commit writes at the top of the
// git directory (see gitTopFiles) is copied back at the end.
var gitBound = []string{"objects", "refs", "logs"}

// resolve is p with every symbolic link resolved, as far as p exists; exists
// says whether all of it does.
func resolve(p string) (string, bool) {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r, true
	}
	var rest []string
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(append([]string{r}, rest...)...), false
		}
		if d == filepath.Dir(d) {
			return p, false
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
}

// existing are paths as they really are, those that exist, each once.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// under reports whether p is one of roots or lies below one.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

// below is p relative to dir when p lies in it ("" for dir itself).
func below(p, dir string) (string, bool) {
	if p == dir {
		return "", true
	}
	if dir == "" || !strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") {
		return "", false
	}
	return strings.TrimPrefix(p, strings.TrimSuffix(dir, "/")+"/"), true
}

// isGitDir reports whether d is a git directory as git recognises one: a
// HEAD file beside objects and refs directories.
func isGitDir(d string) bool {
	for _, c := range []struct {
		name string
		dir  bool
	}{{"HEAD", false}, {"objects", true}, {"refs", true}} {
		st, err := os.Lstat(filepath.Join(d, c.name))
		if err != nil || st.IsDir() != c.dir {
			return false
		}
	}
	return true
}

// isWorktreeGitDir reports whether d is a linked work tree's git directory: a
// HEAD file beside a commondir file naming the repository's common directory.
func isWorktreeGitDir(d string) bool {
	st, err := os.Lstat(filepath.Join(d, "HEAD"))
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	return commonDir(d) != ""
}

// findRepo finds the work tree around dir and its git directories: .git, or
// for a linked work tree or a submodule the directory its .git file names
// (first: the one holding the index) and that directory's common directory.
// Outside a repository it returns dir and none. It reads only small regular files, without blocking (see
// readSmall): a .git that is a link to /proc/kmsg or a FIFO names nothing.
func findRepo(dir string) (top string, gitDirs []string) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		dotGit := filepath.Join(d, ".git")
		if st, err := os.Stat(dotGit); err == nil {
			var gd string
			switch {
			case st.IsDir():
				gd = dotGit
			case st.Mode().IsRegular():
				gd = gitFileTarget(dotGit)
			}
			if gd != "" {
				if r, err := filepath.EvalSymlinks(gd); err == nil && (isGitDir(r) || isWorktreeGitDir(r)) {
					dirs := []string{r}
					if c := commonDir(r); c != "" && c != r {
						dirs = append(dirs, c)
					}
					return d, dirs
				}
			}
		}
		if d == filepath.Dir(d) {
			return filepath.Clean(dir), nil
		}
	}
}

// gitFileTarget reads the "gitdir: PATH" line of a .git file.
func gitFileTarget(p string) string {
	b, err := readSmall(p)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	gd, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return ""
	}
	gd = strings.TrimSpace(gd)
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(filepath.Dir(p), gd)
	}
	return filepath.Clean(gd)
}

// commonDir is the common directory a git directory's commondir file names,
// as it really is, or "".
func commonDir(gd string) string {
	b, err := readSmall(filepath.Join(gd, "commondir"))
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(b))
	if c == "" {
		return ""
	}
	if !filepath.IsAbs(c) {
		c = filepath.Join(gd, c)
	}
	r, err := filepath.EvalSymlinks(c)
	if err != nil || !isGitDir(r) {
		return ""
	}
	return r
}

// smallFile bounds what readSmall reads.
const smallFile = 4096

// readSmall reads at most smallFile bytes of the regular file at p without
// ever blocking: opened non-blocking, its type checked on the descriptor, and
// nothing read from the kernel's own filesystems (/proc/kmsg is a regular
// file whose read waits for the kernel's next message).
func readSmall(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return nil, err
	}
	switch sfs.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC, unix.SECURITYFS_MAGIC,
		unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.BPF_FS_MAGIC:
		return nil, fmt.Errorf("%s is a file of the kernel's", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, smallFile))
	if err != nil && !errors.Is(err, unix.EAGAIN) {
		return nil, err
	}
	return b, nil
}

// maxMasks bounds what the deny_read patterns mask: each match is a mount.
const maxMasks = 256

// denied are the paths that exist, as they really are, that a pattern of deny
// matches and none of allow does. "~/" patterns need a home.
func denied(home string, deny, allow []Place) []string {
	var allowPat []string
	for _, a := range allow {
		if p := expandHome(a.Path, home); p != "" {
			allowPat = append(allowPat, p)
		}
	}
	var out []string
	for _, d := range deny {
		pat := expandHome(d.Path, home)
		if pat == "" {
			continue
		}
		for _, m := range globNoBlock(pat, maxMasks-len(out)) {
			if slices.ContainsFunc(allowPat, func(a string) bool { ok, _ := path.Match(a, m); return ok }) {
				continue
			}
			if r, err := filepath.EvalSymlinks(m); err == nil && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// expandHome makes a "~/" pattern absolute under home ("" without a home).
func expandHome(p, home string) string {
	switch {
	case strings.HasPrefix(p, "~/"):
		if home == "" {
			return ""
		}
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return ""
}

// globNoBlock lists the paths that exist matching pattern, at most limit,
// reading directories without following into what is not one.
func globNoBlock(pattern string, limit int) []string {
	if limit <= 0 {
		return nil
	}
	if !strings.ContainsAny(pattern, `*?[\`) {
		if _, err := os.Lstat(pattern); err == nil {
			return []string{pattern}
		}
		return nil
	}
	matches := []string{"/"}
	for _, el := range strings.Split(strings.TrimPrefix(pattern, "/"), "/") {
		var next []string
		for _, m := range matches {
			if !strings.ContainsAny(el, `*?[\`) {
				p := filepath.Join(m, el)
				if _, err := os.Lstat(p); err == nil {
					next = append(next, p)
				}
				continue
			}
			for _, name := range readDirNames(m) {
				if ok, _ := path.Match(el, name); ok {
					next = append(next, filepath.Join(m, name))
				}
			}
		}
		matches = next
		if len(matches) > limit {
			matches = matches[:limit]
		}
	}
	return matches
}

// readDirNames lists a directory's entries, opening it as a directory only
// (a FIFO in its place is refused, not waited on).
func readDirNames(dir string) []string {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(maxMasks * 4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	slices.Sort(names)
	return names
}

// fileID is what a file was, to tell whether it changed: nothing, or its
// inode, size and modification time.
type fileID struct {
	Exists bool
	Ino    uint64
	Size   int64
	Mtime  int64
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{Exists: true, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano()}
}

// idAt is what name (relative to dirfd) is now, not following a last link.
func idAt(dirfd int, name string) fileID {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileID{}
	}
	return idOf(&st)
}

// maxIndex bounds the index read to find a repository's submodules.
const maxIndex = 256 << 20

// submodules are the gitlinks of the index in gd, the git directory of the
// work tree top: each becomes a place of l as the work tree's .git is. A
// populated submodule's .git file is held read-only (its git directory is
// overlaid, see submoduleGitDirs), a .git directory in the work tree is
// overlaid itself, and an unpopulated submodule's directory is held
// read-only, so that no .git the run makes there is obeyed by the host's
// git going into it.
func submodules(top, gd string, l *layout) []string {
	b, err := readBounded(filepath.Join(gd, "index"), maxIndex)
	if err != nil {
		return nil
	}
	links, err := indexGitlinks(b)
	if err != nil {
		return nil
	}
	for _, p := range links {
		dir := filepath.Join(top, filepath.FromSlash(p))
		if !strings.HasPrefix(dir, top+"/") {
			continue
		}
		st, err := os.Lstat(filepath.Join(dir, ".git"))
		switch {
		case err == nil && st.Mode().IsRegular():
			l.ReadOnly = append(l.ReadOnly, filepath.Join(dir, ".git"))
		case err == nil && st.IsDir():
			l.Git = append(l.Git, gitPlace{Dir: filepath.Join(dir, ".git"), Bound: existingDirs(filepath.Join(dir, ".git"), gitBound)})
		case err != nil:
			if st, err := os.Lstat(dir); err == nil && st.IsDir() {
				l.ReadOnly = append(l.ReadOnly, dir)
			}
		}
	}
	return links
}

// submoduleGitDirs are the git directories the .git files of the work
// tree's submodules name (in the superproject's modules/), as they really
// are.
func submoduleGitDirs(top string, links []string) []string {
	var out []string
	for _, p := range links {
		f := filepath.Join(top, filepath.FromSlash(p), ".git")
		if st, err := os.Lstat(f); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if gd := gitFileTarget(f); gd != "" {
			if r, err := filepath.EvalSymlinks(gd); err == nil && isGitDir(r) && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

func existingDirs(dir string, names []string) []string {
	var out []string
	for _, n := range names {
		if st, err := os.Lstat(filepath.Join(dir, n)); err == nil && st.IsDir() {
			out = append(out, n)
		}
	}
	return out
}

// readBounded reads a regular file of at most limit bytes without blocking
// (see readSmall).
func readBounded(p string, limit int64) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > limit {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", p, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
