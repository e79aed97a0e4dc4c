package netwall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/kernel"
)

// The run's view of the host's files, made by the init in its own mount
// namespace (see privateMounts):
//
//   - every filesystem shared with the host is read-only (sealHost);
//   - /tmp, /run, /dev/shm are fresh tmpfs, and a private layer (a tmpfs
//     reachable by no path once the view is made) holds the upper
//     directories of the overlays below;
//   - the home is an overlay: the real home below, the run's layer above, so
//     it reads as the real one and what the run writes there stays in the
//     layer;
//   - the working directory (or its work tree) and the writable places are
//     bound over that, written for real, nosuid and nodev;
//   - each git directory of the repository is an overlay again, with its
//     objects, refs and logs bound for real: what git obeys (config, hooks,
//     commondir, info ...) stays in the layer, and what a commit writes at
//     the top (index, HEAD, packed-refs ...) is copied back at the end,
//     checked (see gitTopFiles);
//   - read-only binds and masks (an empty read-only file or directory) go
//     over everything: postern's records, the agent, secrets.
//
// Each place of the host is cloned (open_tree) before anything covers it, so
// what is bound later is the real place, writable, whatever is mounted over
// its path meanwhile.

// layerBase is where the private layer is mounted while the view is made,
// under the first hidden root there is, on kernels where it cannot be made
// detached (see makeLayer); it is detached afterwards.
const layerBase = ".postern-layer"

// Names in the private layer.
const (
	layerHome     = "home"      // home/upper, home/work
	layerVoidRead = "void-read" // what a masked file shows: empty, read-only
	layerVoidDir  = "void-dir"  // what a masked directory shows: empty, read-only
)

func layerGit(i int) string { return "git" + strconv.Itoa(i) }

// mounted is what the init keeps of the view it made, for the run's end.
type mounted struct {
	layout layout
	layer  int // the private layer's root (O_PATH), reachable by no path
	home   int // a writable clone of the real home, when Copies need it; -1
	keep   int // a clone of Keep; -1
	git    []mountedGit
	// was is what each of layout.Copies was at the start.
	was map[string]fileID
}

type mountedGit struct {
	gitPlace
	host int               // a writable clone of the real git directory
	was  map[string]fileID // what each of its top files was at the start
}

func (m *mounted) close() {
	for _, fd := range []int{m.layer, m.home, m.keep} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	for _, g := range m.git {
		unix.Close(g.host)
	}
}

// openNoLinks opens p (an absolute real path) refusing symbolic links in any
// element: a place changed since the host planned the layout is refused.
func openNoLinks(p string, flags int) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(p, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return fd, nil
}

// cloneTree is a detached copy of the mounts at p (with those below it), as
// they are now.
func cloneTree(p string) (int, error) {
	fd, err := openNoLinks(p, unix.O_PATH)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	return cloneOpened(fd, "the mount at "+p)
}

// cloneOpened is a detached copy of the mounts at the opened fd (with those
// below it); what names it in an error.
func cloneOpened(fd int, what string) (int, error) {
	t, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", what, err)
	}
	return t, nil
}

// cloneIn clones (open_tree) what name is in the directory dirfd, never
// leaving it.
func cloneIn(dirfd int, name string) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(dirfd, name, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s of the private layer: %w", name, err)
	}
	defer unix.Close(fd)
	return cloneOpened(fd, name+" of the private layer")
}

// attach mounts the detached tree at target with the attributes set added,
// and closes the tree's descriptor.
func attach(tree int, target string, set uint64) error {
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: set}); err != nil {
		return fmt.Errorf("set the mount attributes for %s: %w", target, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount onto %s: %w", target, err)
	}
	return nil
}

// captured are the host's places a layout needs, opened before anything of
// the run's view covers them.
type captured struct {
	home  int   // O_PATH of the real home, the home overlay's lower; -1
	binds []int // clones of layout.Binds
	lower []int // O_PATH of each git directory, its overlay's lower
	bound [][]int
}

func (c *captured) close() {
	for _, fd := range append(append([]int{c.home}, c.binds...), c.lower...) {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	for _, b := range c.bound {
		for _, fd := range b {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
}

// capture opens what l needs of the host. m gets the writable clones kept for
// the run's end.
func capture(l layout, m *mounted) (*captured, error) {
	c := &captured{home: -1}
	var err error
	if l.Home != "" {
		if c.home, err = openNoLinks(l.Home, unix.O_PATH|unix.O_DIRECTORY); err != nil {
			return c, err
		}
		if len(l.Copies) > 0 {
			if m.home, err = cloneTree(l.Home); err != nil {
				return c, err
			}
			m.was = map[string]fileID{}
			for _, rel := range l.Copies {
				m.was[rel] = idAt(m.home, rel)
			}
		}
	}
	for _, b := range l.Binds {
		t, err := cloneTree(b)
		if err != nil {
			return c, err
		}
		c.binds = append(c.binds, t)
	}
	for _, g := range l.Git {
		fd, err := openNoLinks(g.Dir, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return c, err
		}
		c.lower = append(c.lower, fd)
		host, err := cloneTree(g.Dir)
		if err != nil {
			return c, err
		}
		mg := mountedGit{gitPlace: g, host: host, was: map[string]fileID{}}
		m.git = append(m.git, mg)
		for _, name := range topFileNames(host) {
			mg.was[name] = idAt(host, name)
		}
		var bound []int
		for _, sub := range g.Bound {
			t, err := cloneTree(filepath.Join(g.Dir, sub))
			if err != nil {
				return c, err
			}
			bound = append(bound, t)
		}
		c.bound = append(c.bound, bound)
	}
	if l.Keep != "" {
		if m.keep, err = cloneTree(l.Keep); err != nil {
			return c, err
		}
	}
	return c, nil
}

// privateLayer is the private layer while the view is made: path names its
// root for the mounts that take a path (an overlay's upper and work
// directories), fd holds it.
type privateLayer struct {
	path     string
	fd       int  // its root, O_PATH
	detached bool // made detached: no path of the view reaches it
}

// detachedLayers says whether this kernel lets a detached mount be an
// overlay's upper layer and be cloned with open_tree (Linux 6.15), so that
// the private layer can be made detached (see makeLayer).
func detachedLayers() bool { return kernel.AtLeast(6, 15) }

// makeLayer makes the private layer and its directories. Where the kernel
// allows, the layer is a tmpfs mounted nowhere from the start (fsmount),
// named by its descriptor (/proc/self/fd/N, which the fresh /proc still
// resolves); elsewhere it is mounted under base and detached once the view
// is made (detachLayer), an unmount that waits for an RCU grace period
// before the command can start (0.1 to 0.7 ms measured).
func makeLayer(base string, l layout) (*privateLayer, error) {
	layer, err := newLayer(base)
	if err != nil {
		return nil, err
	}
	// Made through the layer's descriptor: the path of a detached one goes
	// through /proc, which is the host's until the run's own is mounted.
	dirs := []string{layerVoidDir}
	if l.Home != "" {
		dirs = append(dirs, layerHome, layerHome+"/upper", layerHome+"/work")
	}
	for i := range l.Git {
		dirs = append(dirs, layerGit(i), layerGit(i)+"/upper", layerGit(i)+"/work")
	}
	for _, d := range dirs {
		if err := unix.Mkdirat(layer.fd, d, 0o700); err != nil {
			layer.close()
			return nil, fmt.Errorf("private layer: mkdir %s: %w", d, err)
		}
	}
	fd, err := unix.Openat(layer.fd, layerVoidRead, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		layer.close()
		return nil, fmt.Errorf("private layer: %s: %w", layerVoidRead, err)
	}
	unix.Close(fd)
	if err := unix.Fchmodat(layer.fd, layerVoidDir, 0o555, 0); err != nil {
		layer.close()
		return nil, fmt.Errorf("private layer: chmod %s: %w", layerVoidDir, err)
	}
	return layer, nil
}

// newLayer mounts the private layer's tmpfs: detached where detachedLayers
// and the kernel makes one (a seccomp profile may refuse fsopen), else under
// base.
func newLayer(base string) (*privateLayer, error) {
	if detachedLayers() {
		if fd, err := detachedTmpfs(); err == nil {
			return &privateLayer{path: "/proc/self/fd/" + strconv.Itoa(fd), fd: fd, detached: true}, nil
		}
	}
	dir := filepath.Join(base, layerBase)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the private layer's mount point: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return nil, fmt.Errorf("mount the private layer: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the private layer: %w", err)
	}
	return &privateLayer{path: dir, fd: fd}, nil
}

// detachedTmpfs makes a tmpfs (mode 0700, nosuid, nodev) mounted nowhere and
// returns its root's descriptor.
func detachedTmpfs() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "mode", "0700"); err != nil {
		return -1, err
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

func (p *privateLayer) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// mountOverlay lays the private layer's name/upper over lowerFD at target.
func mountOverlay(target string, lowerFD int, layer *privateLayer, name string) error {
	opts := fmt.Sprintf("userxattr,lowerdir=/proc/self/fd/%d,upperdir=%s/%s/upper,workdir=%s/%s/work", lowerFD, layer.path, name, layer.path, name)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return &overlayError{target: target, err: err}
	}
	return nil
}

// overlayError is an overlay the kernel refused: the wall cannot keep the
// run's writes to the place private.
type overlayError struct {
	target string
	err    error
}

func (e *overlayError) Error() string {
	return fmt.Sprintf("lay a private layer (overlay) over %s: %v", e.target, e.err)
}

func (e *overlayError) Unwrap() error { return e.err }

// applyLayout makes the writable part of the view over the sealed host: the
// home's overlay, the binds, the git directories, then read-only binds
// (applyMasks, after the run's /proc, covers the rest). layer is the private
// layer's mount point.
func applyLayout(l layout, c *captured, layer *privateLayer) error {
	if c.home >= 0 {
		if err := os.MkdirAll(l.Home, 0o755); err != nil && underHiddenRoot(l.Home) {
			return fmt.Errorf("recreate %s: %w", l.Home, err)
		}
		if err := mountOverlay(l.Home, c.home, layer, layerHome); err != nil {
			return err
		}
	}
	const writable = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	for i, b := range l.Binds {
		if underHiddenRoot(b) {
			if err := os.MkdirAll(b, 0o755); err != nil {
				return fmt.Errorf("recreate %s: %w", b, err)
			}
		}
		t := c.binds[i]
		c.binds[i] = -1
		if err := attach(t, b, writable); err != nil {
			return err
		}
	}
	for i, g := range l.Git {
		if underHiddenRoot(g.Dir) {
			if err := os.MkdirAll(g.Dir, 0o755); err != nil {
				return fmt.Errorf("recreate %s: %w", g.Dir, err)
			}
		}
		if err := mountOverlay(g.Dir, c.lower[i], layer, layerGit(i)); err != nil {
			return err
		}
		for j, sub := range g.Bound {
			t := c.bound[i][j]
			c.bound[i][j] = -1
			if err := attach(t, filepath.Join(g.Dir, sub), writable); err != nil {
				return err
			}
		}
	}
	for _, p := range l.ReadOnly {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		t, err := cloneTree(p)
		if err != nil {
			return err
		}
		if err := attach(t, p, unix.MOUNT_ATTR_RDONLY|writable); err != nil {
			return err
		}
	}
	return nil
}

// applyMasks covers what the run may not read with the private layer's
// void: the layout's masks, then the kernel's files (in the run's /proc,
// which must be mounted first, and under /sys).
func applyMasks(l layout, layer *privateLayer) error {
	for _, p := range l.Masks {
		if err := mask(p, layer, false); err != nil {
			return err
		}
	}
	for _, p := range kernelMasks() {
		if err := mask(p, layer, true); err != nil {
			return err
		}
	}
	return nil
}

// mask covers p with the private layer's empty file or directory, read-only;
// a p not in the run's view needs nothing. A p that cannot be looked at is
// out of the run's reach too, unless it is one of the kernel's (strict),
// which are there to be masked wherever they exist.
func mask(p string, layer *privateLayer, strict bool) error {
	st, err := os.Stat(p)
	switch {
	case err == nil:
	case !strict, errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("mask %s: %w", p, err)
	}
	void := layerVoidRead
	if st.IsDir() {
		void = layerVoidDir
	}
	t, err := cloneIn(layer.fd, void)
	if err != nil {
		return err
	}
	if err := attach(t, p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	return nil
}

// detachLayer makes the private layer unreachable by any path (a detached
// one already is), and returns the descriptor of its root for the run's end.
func detachLayer(layer *privateLayer) (int, error) {
	if !layer.detached {
		if err := unix.Unmount(layer.path, unix.MNT_DETACH); err != nil {
			layer.close()
			return -1, fmt.Errorf("detach the private layer: %w", err)
		}
		_ = os.Remove(layer.path)
	}
	fd := layer.fd
	layer.fd = -1
	return fd, nil
}
