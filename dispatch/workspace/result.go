package workspace

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/postern-dev/postern/remote-agent/agent"
)

// resultRef is the one ref of a result bundle.
const resultRef = "refs/postern/result"

// DefaultMaxResult bounds a result's bundle (--max-result).
const DefaultMaxResult = 1 << 30

// Collect makes the run's result in its work tree and writes it to w as a
// bundle of one ref: the run's HEAD, with one more commit on top holding
// what it left uncommitted. Only plumbing runs in the work tree, with
// hooks off and no configuration but the repository's own (which the wall
// kept the run from changing): the run's hooks, monitors and signing
// settings are never obeyed. A run that changed nothing sends no bundle.
func Collect(ctx context.Context, p Places, req agent.WorkspaceRequest, w io.Writer) (*agent.WorkspaceResult, error) {
	run, err := p.RunDir(req.RunID)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(run); err != nil {
		return nil, fmt.Errorf("the run's work tree is not on this machine (%v): it was removed, or never made", err)
	}
	if err := restoreAlternates(p, run, req.RunID); err != nil {
		return nil, fmt.Errorf("put back what the run's copy borrows objects from: %w", err)
	}
	if req.Base != "" && !validSHA(req.Base) {
		return nil, fmt.Errorf("base %q is not a commit name", req.Base)
	}
	max := req.MaxResult
	if max <= 0 {
		max = DefaultMaxResult
	}
	tmp, err := os.MkdirTemp(p.Runs, ".outgoing-")
	if err != nil {
		return nil, diskFull(p.Runs, err)
	}
	defer os.RemoveAll(tmp)
	// The run's repository is read for its HEAD alone. Everything else
	// happens in a git directory of postern's own that borrows the run's
	// objects, so nothing the run put in its .git (config with filters or
	// monitors, hooks, attributes, alternates of refs) is obeyed.
	// HEAD and its tree, in one process.
	head, headTree := "", emptyTree
	rg := git{dir: run, clean: true, env: []string{"GIT_DIR=" + filepath.Join(run, ".git"), "GIT_CEILING_DIRECTORIES=" + filepath.Dir(run)}}
	if b, err := rg.out(ctx, nil, "rev-parse", "HEAD^{commit}", "HEAD^{tree}"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 && validSHA(f[0]) && validSHA(f[1]) {
			head, headTree = f[0], f[1]
		}
	}
	collect := filepath.Join(tmp, "collect.git")
	// A bare repository is HEAD, objects and refs: made here, not by a
	// git process of its own.
	for _, d := range []string{"objects/info", "refs/postern"} {
		if err := os.MkdirAll(filepath.Join(collect, d), 0o700); err != nil {
			return nil, diskFull(tmp, err)
		}
	}
	if err := os.WriteFile(filepath.Join(collect, "HEAD"), []byte("ref: refs/heads/postern\n"), 0o600); err != nil {
		return nil, diskFull(tmp, err)
	}
	objects, err := filepath.Abs(filepath.Join(run, ".git", "objects"))
	if err != nil {
		return nil, err
	}
	// The run's objects, and the cache's they borrow (read from its
	// alternates file by git, as data).
	if err := os.WriteFile(filepath.Join(collect, "objects", "info", "alternates"), []byte(objects+"\n"), 0o600); err != nil {
		return nil, diskFull(tmp, err)
	}
	// A retried collect makes the same commit: its dates are the run's.
	when := runTime(req.RunID)
	g := git{dir: run, clean: true, env: []string{
		"GIT_DIR=" + collect, "GIT_WORK_TREE=" + run,
		"GIT_INDEX_FILE=" + filepath.Join(tmp, "index"),
		"GIT_AUTHOR_NAME=postern", "GIT_AUTHOR_EMAIL=postern@localhost",
		"GIT_COMMITTER_NAME=postern", "GIT_COMMITTER_EMAIL=postern@localhost",
		"GIT_AUTHOR_DATE=" + when, "GIT_COMMITTER_DATE=" + when,
	}}
	// What is left uncommitted, in an index of postern's own: HEAD's
	// tree, with the stat of each file as postern last hashed it (the index
	// made when the copy was shipped, or by an earlier collect), so that
	// only the files the run touched are read. --reset, not -m: -m refuses
	// an index whose files the run changed ("not uptodate"), which is every
	// run that committed; --reset keeps the stat of each entry whose object
	// HEAD's tree still has and takes the rest from the tree, unhashed.
	saved := p.indexFile(req.RunID)
	if !fileExists(saved) {
		saved = ""
	}
	_, err = seedIndex(ctx, g, filepath.Join(tmp, "index"), saved, head)
	if err != nil {
		return nil, err
	}
	if _, err := g.out(ctx, nil, "-c", "core.autocrlf=false", "add", "-A", "--", "."); err != nil {
		return nil, diskFull(run, fmt.Errorf("collect what the run left uncommitted: %w", err))
	}
	tree, err := g.line(ctx, "write-tree")
	if err != nil {
		return nil, diskFull(run, err)
	}
	// This index was made here, from the files as the run left them: kept
	// beside the copy, it lets a spare copy be reset without hashing every
	// file again (see makeTree). The run's own index is never used for it.
	_ = copyIndex(filepath.Join(tmp, "index"), p.indexFile(req.RunID))
	shipped := ""
	if b, err := os.ReadFile(p.shippedFile(req.RunID)); err == nil {
		shipped = strings.TrimSpace(string(b))
	}
	if head == req.Base && tree == shipped {
		// The run's HEAD and work tree are as they were shipped.
		return &agent.WorkspaceResult{Result: head, Ref: resultRef}, nil
	}
	result := head
	if tree != headTree {
		args := []string{"commit-tree", tree, "-m", "postern: what run " + req.RunID + " left uncommitted\n\nThe run's work tree at its end, beyond its last commit."}
		if head != "" {
			args = append(args, "-p", head)
		}
		if result, err = g.line(ctx, args...); err != nil {
			return nil, diskFull(run, err)
		}
	}
	res := &agent.WorkspaceResult{Result: result, Ref: resultRef}
	if result == "" || result == req.Base {
		return res, nil // nothing changed
	}
	res.Changed = true
	// Whether the result descends from the base, and by how many commits,
	// is asked at home, of the caller's own repository.
	if err := os.WriteFile(filepath.Join(collect, filepath.FromSlash(resultRef)), []byte(result+"\n"), 0o600); err != nil {
		return nil, diskFull(tmp, err)
	}
	bundle := filepath.Join(tmp, "result.bundle")
	var empty bool
	if req.Base != "" {
		empty, err = writeBundle(ctx, g, bundle, result, req.Base)
	}
	if req.Base == "" || err != nil {
		// No base, or the run's copy lost it: the whole history.
		empty, err = writeBundle(ctx, g, bundle, result, "")
	}
	if err != nil {
		return nil, diskFull(run, fmt.Errorf("bundle the result: %w", err))
	}
	if empty {
		return res, nil // the result is in the base's history: nothing to send
	}
	st, err := os.Stat(bundle)
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, &TooLargeError{Size: st.Size(), Max: max}
	}
	f, err := os.Open(bundle)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res.Size = st.Size()
	// The exit frame carries the result; the size travels first, so the
	// controller can bound what it takes before the first byte.
	if _, err := io.Copy(w, f); err != nil {
		return nil, fmt.Errorf("send the result: %w", err)
	}
	return res, nil
}

// runTime is the time a run id was made, as git takes a date; the epoch
// for an id that is not postern's.
func runTime(id string) string {
	if len(id) >= 15 {
		if t, err := time.Parse("20060102-150405", id[:15]); err == nil {
			return strconv.FormatInt(t.Unix(), 10) + " +0000"
		}
	}
	return "0 +0000"
}

// TooLargeError is a result over the limit.
type TooLargeError struct{ Size, Max int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the run's result is %d bytes, over the limit of %d bytes (--max-result %d): it is kept on the machine; fetch it with 'postern runs fetch RUN-ID --max-result BYTES'", e.Size, e.Max, e.Max)
}

// writeBundle writes to path a bundle of one ref, resultRef at result, with
// the objects result has that base has not: git's bundle header written
// here, then one pack-objects' pack. base, when given, is the bundle's one
// prerequisite (the receiver has it: it is the commit that was shipped);
// the pack is not thin, so its deltas need nothing outside it. empty says
// the pack holds no object (the result is in base's history).
func writeBundle(ctx context.Context, g git, path, result, base string) (empty bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var hdr strings.Builder
	if len(result) == 64 {
		hdr.WriteString("# v3 git bundle\n@object-format=sha256\n")
	} else {
		hdr.WriteString("# v2 git bundle\n")
	}
	revs := result + "\n"
	if base != "" {
		hdr.WriteString("-" + base + "\n")
		revs += "^" + base + "\n"
	}
	hdr.WriteString(result + " " + resultRef + "\n\n")
	if _, err := f.WriteString(hdr.String()); err != nil {
		return false, err
	}
	c := g.cmd(ctx, "pack-objects", "--revs", "--stdout", "-q", "--delta-base-offset")
	var stderr strings.Builder
	cw := &countingWriter{w: f}
	c.Stdin, c.Stdout, c.Stderr = strings.NewReader(revs), cw, &stderr
	if err := c.Run(); err != nil {
		return false, &GitError{Args: c.Args[1:], Stderr: stderr.String(), Err: err}
	}
	// A pack's header is "PACK", its version and its count of objects.
	if len(cw.head) < 12 || string(cw.head[:4]) != "PACK" {
		return false, fmt.Errorf("pack-objects wrote no pack")
	}
	n := uint32(cw.head[8])<<24 | uint32(cw.head[9])<<16 | uint32(cw.head[10])<<8 | uint32(cw.head[11])
	return n == 0, nil
}

// countingWriter passes bytes on, keeping the first 12.
type countingWriter struct {
	w    io.Writer
	head []byte
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if k := 12 - len(c.head); k > 0 {
		if k > len(b) {
			k = len(b)
		}
		c.head = append(c.head, b[:k]...)
	}
	return c.w.Write(b)
}

// seedIndex makes the index at path hold head's tree (none: empty), from
// saved, an index postern made of this copy, when there is one: kept says
// its stat information was kept for the entries head's tree still has.
func seedIndex(ctx context.Context, g git, path string, saved string, head string) (kept bool, err error) {
	if head == "" {
		_, err = g.out(ctx, nil, "read-tree", "--empty")
		return false, err
	}
	if saved != "" {
		if err := copyIndex(saved, path); err != nil {
			return false, err
		}
		if _, err := g.out(ctx, nil, "read-tree", "--reset", head); err == nil {
			return true, nil
		}
		_ = os.Remove(path)
	}
	_, err = g.out(ctx, nil, "read-tree", head)
	return false, err
}

// copyIndex copies the git index at from to to, with from's modification
// time: git takes an entry whose file changed in the same instant as the
// index was written (same size, same timestamp) for unchanged unless that
// timestamp is the index file's own, which it then checks by content. A
// copy with a time of its own would hide such a change, a run's write among
// them, and the result would lose it.
func copyIndex(from, to string) error {
	st, err := os.Stat(from)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		return err
	}
	return os.Chtimes(to, st.ModTime(), st.ModTime())
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
