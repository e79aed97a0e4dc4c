package netwall

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/termtext"
)

// At the run's end, with every process of the run gone, the init brings home
// what may come home from the private layer: the top files of each git
// directory a commit writes (checked), the writable places copied back, and,
// when asked, a copy of all the home's layer. The rest of the layer goes with
// the run's mount namespace.

const (
	// maxDiscardsNamed bounds the discarded files an Ending names per place.
	maxDiscardsNamed = 20
	// homeSample is how many of the home's discarded files an Ending names.
	homeSample = 5
	// maxWalk bounds the entries of the layer read to count them.
	maxWalk = 100000
)

// finish brings the run's writes home and says what became of them.
func (m *mounted) finish() Ending {
	var e Ending
	for i := range m.git {
		m.finishGit(i, &e)
	}
	if m.layout.Home != "" {
		m.finishCopies(&e)
		m.countHome(&e)
		if m.keep >= 0 {
			if err := m.keepHome(); err != nil {
				e.Problems = append(e.Problems, fmt.Sprintf("keep the home's writes in %s: %v", m.layout.Keep, err))
			} else {
				e.Kept = m.layout.Keep
			}
		}
	}
	return e
}

// entryType is what a name in the layer is.
type entryType int

const (
	entryNone entryType = iota
	entryFile
	entryDir
	entryLink
	entryWhiteout // overlay's mark of a removed name: a 0/0 character device
	entryOther
)

func typeAt(dirfd int, name string) (entryType, uint32) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return entryNone, 0
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return entryFile, st.Mode
	case unix.S_IFDIR:
		return entryDir, st.Mode
	case unix.S_IFLNK:
		return entryLink, st.Mode
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return entryWhiteout, st.Mode
		}
	}
	return entryOther, st.Mode
}

// listDir lists a directory named relative to dirfd (an O_PATH descriptor
// is enough), sorted.
func listDir(dirfd int, name string) []string {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	slices.Sort(names)
	return names
}

// topFileNames are the names at the top of a git directory that gitTopFile
// knows.
func topFileNames(dirfd int) []string {
	var out []string
	for _, n := range listDir(dirfd, ".") {
		if _, ok := gitTopFile(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// readAt reads a regular file named relative to dirfd, at most limit bytes.
func readAt(dirfd int, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if st.Size > limit {
		return nil, errGitSize
	}
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// writeAt replaces name (relative to dirfd) with data, as git does: a new file
// beside it renamed over it. Only the permission bits of mode are kept.
func writeAt(dirfd int, name string, data []byte, mode uint32) error {
	tmp := name + ".postern-" + randSuffix()
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
	}
	return err
}

func randSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// finishGit copies back a git directory's top files a commit wrote, checked,
// unless the host changed them meanwhile, and names what git would obey.
func (m *mounted) finishGit(i int, e *Ending) {
	g := m.git[i]
	upper := layerGit(i) + "/upper"
	named := 0
	discard := func(p, why string) {
		if named < maxDiscardsNamed {
			e.Discarded = append(e.Discarded, Discard{Path: path.Join(g.Dir, p), Why: why})
		}
		named++
	}
	// A commondir the run wrote made its git keep objects and references
	// elsewhere, in what is discarded: its top files would name them.
	redirected := false
	if t, _ := typeAt(m.layer, upper+"/commondir"); t != entryNone {
		redirected = true
	}
	for _, name := range listDir(m.layer, upper) {
		rel := upper + "/" + name
		typ, mode := typeAt(m.layer, rel)
		check, top := gitTopFile(name)
		switch {
		case top && redirected && typ == entryFile:
			discard(name, "the run's git kept its objects elsewhere (it wrote commondir); its "+name+" was not copied back")
		case top && redirected:
		case top && (typ == entryFile || typ == entryWhiteout):
			if idAt(g.host, name) != g.was[name] {
				discard(name, "changed on the host during the run; the run's version was not copied back")
				continue
			}
			if typ == entryWhiteout {
				if err := unix.Unlinkat(g.host, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
					e.Problems = append(e.Problems, fmt.Sprintf("remove %s: %v", path.Join(g.Dir, name), err))
				}
				continue
			}
			data, err := readAt(m.layer, rel, maxGitIndex)
			if err == nil {
				err = check(data)
			}
			if err != nil {
				discard(name, "not what git writes there ("+err.Error()+"); it was not copied back")
				continue
			}
			if name == "index" && g.Index {
				if added := addedGitlinks(data, g.Gitlinks); len(added) > 0 {
					discard(name, fmt.Sprintf("it adds the submodule(s) %s, where git on the host would obey a repository the run made; it was not copied back",
						strings.Join(added, ", ")))
					continue
				}
			}
			if err := writeAt(g.host, name, data, mode); err != nil {
				e.Problems = append(e.Problems, fmt.Sprintf("copy back %s: %v", path.Join(g.Dir, name), err))
			}
		case slices.Contains(gitBound, name) && !slices.Contains(g.Bound, name) && typ == entryDir:
			// Made during the run (the first reflog): data like the rest.
			if err := copyTree(m.layer, rel, g.host, name, false); err != nil {
				e.Problems = append(e.Problems, fmt.Sprintf("copy back %s: %v", path.Join(g.Dir, name), err))
			}
		case typ == entryWhiteout || quietGitName(name):
		case typ == entryDir:
			walkLayer(m.layer, rel, func(sub string, t entryType) {
				if t == entryFile || t == entryLink {
					discard(name+"/"+sub, "git obeys what is there; only what a commit writes reaches a repository's git directory")
				}
			})
		default:
			discard(name, "git obeys it; only what a commit writes reaches a repository's git directory")
		}
	}
	if named > maxDiscardsNamed {
		e.Discarded = append(e.Discarded, Discard{Path: g.Dir, Why: fmt.Sprintf("and %d more files the run wrote there, discarded", named-maxDiscardsNamed)})
	}
}

// quietGitName are what git leaves at the top of a git directory in passing:
// discarded without a word.
func quietGitName(name string) bool {
	return strings.HasSuffix(name, ".lock") || name == "gc.pid" || name == "gc.log"
}

// finishCopies copies back the writable places below the home that were
// files or did not exist, unless the host changed them meanwhile.
func (m *mounted) finishCopies(e *Ending) {
	for _, rel := range m.layout.Copies {
		up := layerHome + "/upper/" + rel
		typ, mode := typeAt(m.layer, up)
		if typ == entryNone || typ == entryOther {
			continue
		}
		full := path.Join(m.layout.Home, rel)
		if idAt(m.home, rel) != m.was[rel] {
			e.Discarded = append(e.Discarded, Discard{Path: full, Why: "changed on the host during the run; the run's version was not copied back"})
			continue
		}
		parent, base := path.Dir(rel), path.Base(rel)
		pfd, err := openBeneath(m.home, parent, typ != entryWhiteout)
		if err != nil {
			e.Problems = append(e.Problems, fmt.Sprintf("copy back %s: %v", full, err))
			continue
		}
		switch typ {
		case entryWhiteout:
			err = unix.Unlinkat(pfd, base, 0)
			if errors.Is(err, unix.EISDIR) {
				err = nil // a directory removed by the run stays: it was bound
			}
		case entryFile:
			var data []byte
			if data, err = readAt(m.layer, up, 1<<40); err == nil {
				err = writeAt(pfd, base, data, mode)
			}
		case entryLink:
			err = copyLink(m.layer, up, pfd, base)
		case entryDir:
			err = copyTree(m.layer, up, pfd, base, true)
		}
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			e.Problems = append(e.Problems, fmt.Sprintf("copy back %s: %v", full, err))
		}
	}
}

// openBeneath opens the directory rel below dirfd, refusing links and
// anything outside it; with make, the directories missing are made.
func openBeneath(dirfd int, rel string, make bool) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(dirfd, rel, how)
	if err == nil || !make || !errors.Is(err, unix.ENOENT) || rel == "." {
		return fd, err
	}
	pfd, err := openBeneath(dirfd, path.Dir(rel), true)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, path.Base(rel), 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return unix.Openat2(dirfd, rel, how)
}

func copyLink(srcfd int, src string, dstfd int, dst string) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(srcfd, src, buf)
	if err != nil {
		return err
	}
	tmp := dst + ".postern-" + randSuffix()
	if err := unix.Symlinkat(string(buf[:n]), dstfd, tmp); err != nil {
		return err
	}
	if err := unix.Renameat(dstfd, tmp, dstfd, dst); err != nil {
		_ = unix.Unlinkat(dstfd, tmp, 0)
		return err
	}
	return nil
}

// copyTree copies the directory src (relative to srcfd) to dst (relative to
// dstfd, made if missing): directories, regular files with their permission
// bits (never setuid or setgid), and with links, symbolic links. Whiteouts
// and other kinds are left out.
func copyTree(srcfd int, src string, dstfd int, dst string, links bool) error {
	if err := unix.Mkdirat(dstfd, dst, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	dfd, err := unix.Openat2(dstfd, dst, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var first error
	for _, name := range listDir(srcfd, src) {
		s := src + "/" + name
		typ, mode := typeAt(srcfd, s)
		var err error
		switch typ {
		case entryDir:
			err = copyTree(srcfd, s, dfd, name, links)
		case entryFile:
			var data []byte
			if data, err = readAt(srcfd, s, 1<<40); err == nil {
				err = writeAt(dfd, name, data, mode)
			}
		case entryLink:
			if links {
				err = copyLink(srcfd, s, dfd, name)
			}
		}
		if err != nil && first == nil {
			first = fmt.Errorf("%s: %w", name, err)
		}
	}
	return first
}

// walkLayer calls fn for each entry below dir (relative to dirfd),
// shallowest first, at most maxWalk.
func walkLayer(dirfd int, dir string, fn func(rel string, t entryType)) {
	queue := []string{""}
	for seen := 0; len(queue) > 0 && seen < maxWalk; {
		d := queue[0]
		queue = queue[1:]
		full := dir
		if d != "" {
			full = dir + "/" + d
		}
		for _, name := range listDir(dirfd, full) {
			seen++
			rel := name
			if d != "" {
				rel = d + "/" + name
			}
			t, _ := typeAt(dirfd, dir+"/"+rel)
			if t == entryDir {
				queue = append(queue, rel)
			}
			fn(rel, t)
		}
	}
}

// countHome counts what the run wrote in its home outside its writable
// places: all of it stays in the layer.
func (m *mounted) countHome(e *Ending) {
	walkLayer(m.layer, layerHome+"/upper", func(rel string, t entryType) {
		if t != entryFile && t != entryLink {
			return
		}
		for _, c := range m.layout.Copies {
			if rel == c || strings.HasPrefix(rel, c+"/") {
				return
			}
		}
		e.HomeWrites++
		if len(e.HomeSample) < homeSample {
			e.HomeSample = append(e.HomeSample, "~/"+rel)
		}
	})
}

// keepHome copies the home's layer into Keep: home/ holds what the run wrote,
// "removed" lists what it removed, one path below the home a line.
func (m *mounted) keepHome() error {
	err := copyTree(m.layer, layerHome+"/upper", m.keep, "home", true)
	var removed strings.Builder
	walkLayer(m.layer, layerHome+"/upper", func(rel string, t entryType) {
		if t == entryWhiteout {
			removed.WriteString(rel + "\n")
		}
	})
	if werr := writeAt(m.keep, "removed", []byte(removed.String()), 0o600); err == nil {
		err = werr
	}
	return err
}

// addedGitlinks are the gitlinks of the index data that were not in before.
func addedGitlinks(data []byte, before []string) []string {
	links, err := indexGitlinks(data)
	if err != nil {
		return []string{"(an index whose entries cannot be read)"}
	}
	var out []string
	for _, l := range links {
		if !slices.Contains(before, l) {
			out = append(out, termtextQuote(l))
		}
	}
	return out
}

// termtextQuote shows a path the run chose as printable text.
func termtextQuote(s string) string { return termtext.Printable(s) }
