package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/postern-dev/postern/remote-agent/agent"
)

// Places are where a machine keeps workspaces: the repositories' caches
// and the runs' work trees.
type Places struct {
	Cache string // one bare repository per repository shipped here
	Runs  string // one work tree per run
}

// DefaultPlaces are the places under the home's XDG directories:
// ~/.cache/postern/workspaces and ~/.local/share/postern/workspaces.
func DefaultPlaces() (Places, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return Places{}, fmt.Errorf("workspaces: %w", err)
	}
	cache := filepath.Join(home, ".cache")
	if d := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		cache = d
	}
	data := filepath.Join(home, ".local", "share")
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		data = d
	}
	return Places{Cache: filepath.Join(cache, "postern", "workspaces"), Runs: filepath.Join(data, "postern", "workspaces")}, nil
}

// Compiled on first use: every start of the binary (the wall's init too)
// would otherwise pay for them in package initialisation.
var (
	idPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,80}$`) })
	keyPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^r-[0-9a-f]{24}$`) })
)

// RunDir is the run's work tree.
func (p Places) RunDir(runID string) (string, error) {
	if !idPattern().MatchString(runID) {
		return "", fmt.Errorf("run id %q is not one postern makes", runID)
	}
	return filepath.Join(p.Runs, runID), nil
}

// indexFile holds an index of the run's copy made by Collect.
func (p Places) indexFile(runID string) string {
	return filepath.Join(p.Runs, "."+runID+".index")
}

// shippedFile holds the tree of a run's copy as shipped.
func (p Places) shippedFile(runID string) string {
	return filepath.Join(p.Runs, "."+runID+".shipped")
}

// alternatesFile holds what the run's copy borrows objects from, as
// postern wrote it in the copy's objects/info/alternates: the run may
// rewrite that file (objects are what a commit writes), so Collect puts
// this back before it reads anything.
func (p Places) alternatesFile(runID string) string {
	return filepath.Join(p.Runs, "."+runID+".alternates")
}

// restoreAlternates puts back the copy's objects/info/alternates as
// Prepare wrote it, so that a run cannot point the reading of its result
// at object directories elsewhere on the machine. A copy prepared without
// the record of it is left as it is.
func restoreAlternates(p Places, run, runID string) error {
	want, err := os.ReadFile(p.alternatesFile(runID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	info := filepath.Join(run, ".git", "objects", "info")
	if st, err := os.Lstat(info); err == nil && !st.IsDir() {
		if err := os.Remove(info); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(info, 0o700); err != nil {
		return err
	}
	alt := filepath.Join(info, "alternates")
	if err := os.RemoveAll(alt); err != nil {
		return err
	}
	if len(want) == 0 {
		return nil
	}
	return os.WriteFile(alt, want, 0o600)
}

// shippedTree is the tree of the work tree at run as it is now, hashed
// from a copy of its fresh index (only what the snapshot changed is read).
func shippedTree(ctx context.Context, run, tmp string) (string, error) {
	index := filepath.Join(tmp, "shipped-index")
	if b, err := os.ReadFile(filepath.Join(run, ".git", "index")); err == nil {
		if err := os.WriteFile(index, b, 0o600); err != nil {
			return "", err
		}
	}
	g := git{dir: run, clean: true, env: []string{"GIT_DIR=" + filepath.Join(run, ".git"), "GIT_WORK_TREE=" + run, "GIT_INDEX_FILE=" + index}}
	if _, err := g.out(ctx, nil, "-c", "core.autocrlf=false", "add", "-A", "--", "."); err != nil {
		return "", err
	}
	return g.line(ctx, "write-tree")
}

func (p Places) cacheDir(key string) (string, error) {
	if !keyPattern().MatchString(key) {
		return "", fmt.Errorf("repository key %q is not one postern makes", key)
	}
	return filepath.Join(p.Cache, key+".git"), nil
}

// diskFull turns "no space left" into what to do.
func diskFull(where string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "No space left") || strings.Contains(err.Error(), "no space left") {
		return fmt.Errorf("the machine's disk is full at %s (%v): free space there and run again; nothing was started", where, err)
	}
	return err
}

// Inspect says whether this machine has git and which commits the cache of
// the repository key holds.
func Inspect(ctx context.Context, p Places, key string) (*agent.WorkspaceResult, error) {
	v, err := GitVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w on this machine: install git there (e.g. apt-get install git), or run with --workspace none", err)
	}
	res := &agent.WorkspaceResult{Git: v}
	if key == "" {
		return res, nil
	}
	dir, err := p.cacheDir(key)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return res, nil
	}
	out, err := git{dir: dir, clean: true}.out(ctx, nil, "for-each-ref", "--sort=-committerdate", "--count=64", "--format=%(objectname)", "refs/shipped/")
	if err != nil {
		return nil, err
	}
	res.Known = strings.Fields(string(out))
	return res, nil
}

// Prepare makes the run's work tree from the upload: the bundle, unpacked
// into the repository's cache, then the snapshot. objects, if set, is an
// object directory on this machine that holds the history already (a local
// copy), used in place of a cache.
func Prepare(ctx context.Context, p Places, req agent.WorkspaceRequest, upload io.Reader, objects string) (*agent.WorkspaceResult, error) {
	run, err := p.RunDir(req.RunID)
	if err != nil {
		return nil, err
	}
	if req.Base != "" && !validSHA(req.Base) {
		return nil, fmt.Errorf("base %q is not a commit name", req.Base)
	}
	if req.Branch != "" {
		if ok, _ := (git{clean: true}).ok(ctx, "check-ref-format", "refs/heads/"+req.Branch); !ok {
			return nil, fmt.Errorf("branch %q is not a branch name", req.Branch)
		}
	}
	if err := os.MkdirAll(p.Runs, 0o700); err != nil {
		return nil, diskFull(p.Runs, err)
	}
	if _, err := os.Lstat(run); err == nil {
		return nil, fmt.Errorf("the run's work tree %s is there already", run)
	}
	// A spare copy of an earlier run of the repository is reset rather than
	// a whole tree checked out again (see Remove).
	spare := !req.Plain && req.Key != "" && p.takeSpare(req.Key, run)
	if !spare {
		if err := os.Mkdir(run, 0o700); err != nil {
			return nil, diskFull(run, fmt.Errorf("make the run's work tree: %w", err))
		}
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(run)
		}
	}()
	// The upload lands in files first: the controller is not kept waiting
	// while git works.
	tmp, err := os.MkdirTemp(p.Runs, ".incoming-")
	if err != nil {
		return nil, diskFull(p.Runs, err)
	}
	defer os.RemoveAll(tmp)
	bundle := filepath.Join(tmp, "history.bundle")
	snap := filepath.Join(tmp, "snapshot.tar")
	if req.BundleSize > 0 {
		if err := receiveFile(bundle, io.LimitReader(upload, req.BundleSize), req.BundleSize); err != nil {
			return nil, diskFull(p.Runs, fmt.Errorf("receive the history: %w", err))
		}
	}
	if err := receiveFile(snap, upload, -1); err != nil {
		return nil, diskFull(p.Runs, fmt.Errorf("receive the work tree: %w", err))
	}

	if !req.Plain {
		if objects == "" && req.Key != "" {
			cache, err := p.cacheDir(req.Key)
			if err != nil {
				return nil, err
			}
			if err := ensureCache(ctx, cache); err != nil {
				return nil, diskFull(cache, err)
			}
			cg := git{dir: cache, clean: true}
			if req.BundleSize > 0 {
				if _, err := cg.out(ctx, nil, "bundle", "unbundle", bundle); err != nil {
					return nil, diskFull(cache, fmt.Errorf("unpack the history into the cache: %w", err))
				}
			}
			if req.Base != "" {
				if _, err := cg.out(ctx, nil, "update-ref", "refs/shipped/"+req.Base, req.Base); err != nil {
					// Another run of the repository may hold the ref's lock
					// this instant: what matters is that the commit is here.
					if ok, _ := cg.ok(ctx, "cat-file", "-e", req.Base+"^{commit}"); !ok {
						return nil, diskFull(cache, fmt.Errorf("the cache lacks the base %s: %w", req.Base, err))
					}
				}
			}
			objects = filepath.Join(cache, "objects")
		}
		err := makeTree(ctx, run, objects, req, spare)
		if err != nil && spare {
			// A spare that will not reset is dropped for a fresh tree.
			if err = os.RemoveAll(run); err == nil {
				if err = os.Mkdir(run, 0o700); err == nil {
					err = makeTree(ctx, run, objects, req, false)
				}
			}
		}
		if err != nil {
			return nil, diskFull(run, err)
		}
	}
	f, err := os.Open(snap)
	if err != nil {
		return nil, err
	}
	err = applySnapshot(ctx, run, f)
	f.Close()
	if err != nil {
		return nil, diskFull(run, err)
	}
	if !req.Plain {
		// The tree as shipped, beside the copy where the run cannot write:
		// a run whose work tree is still this changed nothing.
		tree, err := shippedTree(ctx, run, tmp)
		if err != nil {
			return nil, diskFull(run, err)
		}
		if err := os.WriteFile(p.shippedFile(req.RunID), []byte(tree+"\n"), 0o600); err != nil {
			return nil, diskFull(p.Runs, err)
		}
		alternates := ""
		if objects != "" {
			alternates = objects + "\n"
		}
		if err := os.WriteFile(p.alternatesFile(req.RunID), []byte(alternates), 0o600); err != nil {
			return nil, diskFull(p.Runs, err)
		}
		// Its index too, made here before the run: Collect starts from it
		// and hashes only the files whose stat the run changed.
		if shipped := filepath.Join(tmp, "shipped-index"); fileExists(shipped) {
			if err := copyIndex(shipped, p.indexFile(req.RunID)); err != nil {
				return nil, diskFull(p.Runs, err)
			}
		}
	}
	ok = true
	return &agent.WorkspaceResult{Dir: run}, nil
}

func receiveFile(path string, r io.Reader, want int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && want >= 0 && n != want {
		err = fmt.Errorf("got %d of %d bytes: the connection ended early", n, want)
	}
	return err
}

// ensureCache makes the bare cache repository, whole or not at all.
func ensureCache(ctx context.Context, cache string) error {
	if _, err := os.Stat(filepath.Join(cache, "HEAD")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o700); err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := cache + ".tmp-" + hex.EncodeToString(rnd[:])
	if _, err := (git{clean: true}).out(ctx, nil, "-c", "init.defaultBranch=postern", "init", "-q", "--bare", tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, cache); err != nil {
		_ = os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(cache, "HEAD")); serr == nil {
			return nil // another run made it first
		}
		return err
	}
	return nil
}

// makeTree makes the run's repository at run: its objects borrowed from
// objects, HEAD at the base on the person's branch, the base checked out.
//
// With reuse, run is a spare copy an earlier run left: every .git in it
// is removed first (nothing of the earlier run's repository is kept or
// obeyed), and the tree is then brought to the base by git, which hashes
// every file against the base, rewrites those that differ and removes
// everything else, ignored files and repositories included.
func makeTree(ctx context.Context, run, objects string, req agent.WorkspaceRequest, reuse bool) error {
	if reuse {
		if err := removeGitDirs(run); err != nil {
			return err
		}
	}
	branch := req.Branch
	if branch == "" {
		branch = "main"
	}
	if _, err := (git{clean: true}).out(ctx, nil, "-c", "init.defaultBranch="+branch, "init", "-q", run); err != nil {
		return err
	}
	g := git{dir: run, clean: true}
	if objects != "" {
		if err := os.WriteFile(filepath.Join(run, ".git", "objects", "info", "alternates"), []byte(objects+"\n"), 0o600); err != nil {
			return err
		}
	}
	name, email := req.RunID, "postern@localhost"
	if n, e := strings.TrimSpace(req.Name), strings.TrimSpace(req.Email); n != "" && e != "" {
		name, email = n, e
	}
	if _, err := g.out(ctx, nil, "config", "user.name", name); err != nil {
		return err
	}
	if _, err := g.out(ctx, nil, "config", "user.email", email); err != nil {
		return err
	}
	if req.Base == "" {
		return nil
	}
	if req.Branch != "" {
		if _, err := g.out(ctx, nil, "update-ref", "refs/heads/"+req.Branch, req.Base); err != nil {
			return fmt.Errorf("the base %s is not in the machine's copy of the history: %w", req.Base, err)
		}
	} else if _, err := g.out(ctx, nil, "update-ref", "--no-deref", "HEAD", req.Base); err != nil {
		return fmt.Errorf("the base %s is not in the machine's copy of the history: %w", req.Base, err)
	}
	spareIndex := run + ".spare-index"
	defer os.Remove(spareIndex)
	if reuse && fileExists(spareIndex) {
		// The index Collect made of this tree: reset compares each file's
		// stat with it and rewrites only those that differ from the base.
		if err := copyIndex(spareIndex, filepath.Join(run, ".git", "index")); err != nil {
			return err
		}
	} else if reuse {
		if _, err := g.out(ctx, nil, "read-tree", "HEAD"); err != nil {
			return err
		}
		// Exit status 1 is "needs update": the files reset rewrites.
		if _, err := g.out(ctx, nil, "-c", "core.autocrlf=false", "update-index", "-q", "--refresh"); err != nil {
			var ge *GitError
			if !asGitError(err, &ge) {
				return err
			}
		}
	}
	if _, err := g.out(ctx, nil, "-c", "core.autocrlf=false", "reset", "-q", "--hard", "HEAD"); err != nil {
		return fmt.Errorf("check out the base: %w", err)
	}
	if reuse {
		if _, err := g.out(ctx, nil, "clean", "-ffdxq"); err != nil {
			return fmt.Errorf("clean the spare copy: %w", err)
		}
	}
	return nil
}

// removeGitDirs removes every .git in the tree at root, never following a
// link, and every file that is a hard link (a name for a file elsewhere,
// which a later run's write would reach) or has a set-id bit: git checks
// those out again as new files.
func removeGitDirs(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if st, err := os.Lstat(p); err == nil {
				sys, _ := st.Sys().(*syscall.Stat_t)
				if (sys != nil && sys.Nlink > 1) || st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
					return os.Remove(p)
				}
			}
			return nil
		}
		if d.Name() == ".git" && p != root {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

// maxSpares is how many spare copies of one repository a machine keeps.
const maxSpares = 1

func (p Places) sparePrefix(key string) string { return filepath.Join(p.Runs, ".spare-"+key+"-") }

// takeSpare moves a spare copy of the repository key to run, if there is
// one: a rename, so that two runs never take the same.
func (p Places) takeSpare(key, run string) bool {
	if !keyPattern().MatchString(key) {
		return false
	}
	spares, _ := filepath.Glob(p.sparePrefix(key) + "*")
	for _, s := range spares {
		if strings.HasSuffix(s, ".index") {
			continue
		}
		if os.Rename(s, run) == nil {
			// Its index, if Collect made one, goes with it.
			_ = os.Rename(s+".index", run+".spare-index")
			return true
		}
	}
	return false
}

// Remove removes the run's work tree. With the repository's key, a run's
// tree is kept as the repository's spare copy if it has none: the next run
// of the repository resets it instead of checking out every file (see
// makeTree).
func Remove(p Places, runID, key string) (*agent.WorkspaceResult, error) {
	run, err := p.RunDir(runID)
	if err != nil {
		return nil, err
	}
	if keyPattern().MatchString(key) {
		if spares, _ := filepath.Glob(p.sparePrefix(key) + "*"); len(spares) < maxSpares {
			var rnd [6]byte
			_, _ = rand.Read(rnd[:])
			spare := p.sparePrefix(key) + hex.EncodeToString(rnd[:])
			if os.Rename(run, spare) == nil {
				_ = os.Remove(p.shippedFile(runID))
				_ = os.Remove(p.alternatesFile(runID))
				_ = os.Rename(p.indexFile(runID), spare+".index")
				return &agent.WorkspaceResult{Dir: run}, nil
			}
		}
	}
	if err := os.RemoveAll(run); err != nil {
		return nil, fmt.Errorf("remove the run's work tree %s: %w", run, err)
	}
	for _, f := range []string{p.shippedFile(runID), p.indexFile(runID), p.alternatesFile(runID)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return &agent.WorkspaceResult{Dir: run}, nil
}
