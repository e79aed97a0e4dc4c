package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Source is the work a run takes with it: a git work tree (or, Plain, a
// directory), where in it the person is, and HEAD.
type Source struct {
	Root   string // the work tree's top, absolute
	Subdir string // where the person is, relative to Root with slashes; "" at the top
	Base   string // HEAD's commit; "" in a repository with no commits
	Branch string // the branch HEAD names; "" when detached
	// Key names the repository's cache on machines: the hash of its root
	// commits, so clones of one project share it. "" with no commits.
	Key string
	// Objects is the repository's object directory, absolute.
	Objects string
	// Identity is the person's git identity ("Name", "email"), given to
	// the run's copy so that the run's commits are the person's.
	Name, Email string
	// Plain is a directory that is not a git work tree.
	Plain bool
}

// ErrNotRepository means the directory is not inside a git work tree.
var ErrNotRepository = errors.New("not inside a git work tree")

// ErrSubmodules is a repository with submodules, which are not shipped.
var ErrSubmodules = errors.New("the repository has submodules")

// Find finds the work tree around dir. Outside one it returns
// ErrNotRepository.
func Find(ctx context.Context, dir string) (*Source, error) {
	if _, err := GitVersion(ctx); err != nil {
		return nil, fmt.Errorf("%w here: a run can take its repository along only with git (install git, or use --workspace none)", err)
	}
	g := git{dir: dir}
	inside, err := g.line(ctx, "rev-parse", "--is-inside-work-tree")
	if err != nil || inside != "true" {
		return nil, ErrNotRepository
	}
	out, err := g.out(ctx, nil, "rev-parse", "--show-toplevel", "--show-prefix", "--git-path", "objects")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 3 {
		return nil, fmt.Errorf("git rev-parse: unexpected answer %q", out)
	}
	s := &Source{Root: lines[0], Subdir: strings.TrimSuffix(lines[1], "/"), Objects: lines[2]}
	if !filepath.IsAbs(s.Objects) {
		s.Objects = filepath.Join(dir, s.Objects)
	}
	g.dir = s.Root
	if s.Base, err = g.line(ctx, "rev-parse", "-q", "--verify", "HEAD^{commit}"); err != nil {
		s.Base = "" // no commits yet
	}
	if b, err := g.line(ctx, "symbolic-ref", "-q", "--short", "HEAD"); err == nil {
		s.Branch = b
	}
	s.Name, _ = g.line(ctx, "config", "user.name")
	s.Email, _ = g.line(ctx, "config", "user.email")
	staged, err := g.out(ctx, nil, "ls-files", "-s", "-z")
	if err != nil {
		return nil, err
	}
	for _, e := range bytes.Split(staged, []byte{0}) {
		if bytes.HasPrefix(e, []byte("160000 ")) {
			_, name, _ := bytes.Cut(e, []byte("\t"))
			return nil, fmt.Errorf("%w (%q): workspaces do not ship submodules; run with --workspace none, or ship a directory with --workspace DIR", ErrSubmodules, name)
		}
	}
	if s.Base != "" {
		roots, err := g.out(ctx, nil, "rev-list", "--max-parents=0", "HEAD")
		if err != nil {
			return nil, err
		}
		list := strings.Fields(string(roots))
		slices.Sort(list)
		sum := sha256.Sum256([]byte(strings.Join(list, "\n")))
		s.Key = "r-" + hex.EncodeToString(sum[:12])
	}
	return s, nil
}

// Plain is a plain directory as a run's work.
func Plain(dir string) (*Source, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("--workspace %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--workspace %s: not a directory", dir)
	}
	return &Source{Root: abs, Plain: true}, nil
}

// Changes are the paths of the work tree that differ from HEAD: changed,
// added, deleted and untracked files that are not ignored, relative to the
// top with slashes. A plain directory's are all its files. skipped are
// untracked directories that are repositories of their own, not shipped.
func (s *Source) Changes(ctx context.Context) (paths, skipped []string, err error) {
	if s.Plain {
		err := filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(s.Root, p)
			paths = append(paths, filepath.ToSlash(rel))
			return nil
		})
		return paths, nil, err
	}
	out, err := git{dir: s.Root}.out(ctx, nil, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=all")
	if err != nil {
		return nil, nil, err
	}
	for _, e := range strings.Split(string(out), "\x00") {
		if len(e) < 4 {
			continue
		}
		p := e[3:]
		if strings.HasSuffix(p, "/") {
			skipped = append(skipped, p)
			continue
		}
		paths = append(paths, p)
	}
	return paths, skipped, nil
}

// WriteSnapshot writes the snapshot of paths to w.
func (s *Source) WriteSnapshot(paths []string, w io.Writer) (skipped []string, err error) {
	return writeSnapshot(s.Root, paths, w)
}

// Bundle writes to path a bundle of HEAD's history without what the known
// commits already hold; it returns false, writing nothing, when the
// machine has everything (HEAD is known, or there is no HEAD).
func (s *Source) Bundle(ctx context.Context, known []string, path string) (bool, error) {
	if s.Base == "" || slices.Contains(known, s.Base) {
		return false, nil
	}
	g := git{dir: s.Root}
	args := []string{"bundle", "create", "-q", path, "HEAD"}
	if len(known) > 0 {
		// Only the commits this repository has too can be left out.
		in := strings.Join(known, "\n") + "\n"
		out, err := g.out(ctx, strings.NewReader(in), "cat-file", "--batch-check=%(objectname) %(objecttype)")
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(out), "\n") {
			if sha, typ, ok := strings.Cut(l, " "); ok && typ == "commit" && validSHA(sha) {
				args = append(args, "^"+sha)
			}
		}
	}
	if _, err := g.out(ctx, nil, args...); err != nil {
		var ge *GitError
		if errors.As(err, &ge) && strings.Contains(ge.Stderr, "empty bundle") {
			return false, nil // HEAD is in a known commit's history
		}
		return false, err
	}
	return true, nil
}
