package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/postern-dev/postern/remote-agent/agent"
)

// BranchPrefix is where results land in the caller's repository.
const BranchPrefix = "postern/"

// Branch is the result branch of a run.
func Branch(runID string) string { return BranchPrefix + runID }

// Limited is a writer that takes at most Max bytes: one more is an error
// naming the limit.
type Limited struct {
	W   io.Writer
	Max int64
	N   int64
}

func (l *Limited) Write(b []byte) (int, error) {
	if l.N+int64(len(b)) > l.Max {
		return 0, &TooLargeError{Size: l.N + int64(len(b)), Max: l.Max}
	}
	n, err := l.W.Write(b)
	l.N += int64(n)
	return n, err
}

// Imported is a result now in the caller's repository.
type Imported struct {
	Branch   string // e.g. postern/RUN
	Commit   string
	Descends bool // the result descends from the base
	Commits  int  // the result's commits that the base has not
}

// ErrBranchExists is a result branch that is already there with another
// commit.
var ErrBranchExists = errors.New("the result branch already exists")

// Import takes a run's result into the caller's repository at root: the
// bundle's objects are unpacked (git index-pack checks each), then exactly
// one ref is created, refs/heads/postern/RUN, only if it is not there: the
// checked-out branch, the index, the files and every other ref stay as they
// are. bundle is "" when the result needs no objects (they are here).
func Import(ctx context.Context, root, runID, base string, res *agent.WorkspaceResult, bundle string) (*Imported, error) {
	if res == nil || !res.Changed || !validSHA(res.Result) {
		return nil, errors.New("no result to import")
	}
	if !idPattern().MatchString(runID) {
		return nil, fmt.Errorf("run id %q is not one postern makes", runID)
	}
	g := git{dir: root}
	if bundle != "" {
		f, err := os.Open(bundle)
		if err != nil {
			return nil, err
		}
		h, err := ParseBundleHeader(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("the run's result: %w", err)
		}
		if len(h.Refs) != 1 || h.Refs[0].Name != resultRef || h.Refs[0].SHA != res.Result {
			return nil, fmt.Errorf("the run's result bundle carries %d refs (%v), want exactly %s at %s", len(h.Refs), h.Refs, resultRef, res.Result)
		}
		// unbundle writes objects only (a pack, checked by index-pack); it
		// updates no ref and runs no hook.
		if _, err := g.out(ctx, nil, "bundle", "unbundle", bundle); err != nil {
			return nil, fmt.Errorf("unpack the run's result: %w", err)
		}
	}
	branch := Branch(runID)
	ref := "refs/heads/" + branch
	// Created only if absent, atomically (a lock file renamed into place);
	// git refuses a name of no object, or of one that is not a commit.
	if _, err := g.out(ctx, nil, "update-ref", "-m", "postern: result of run "+runID, ref, res.Result, ""); err != nil {
		cur, cerr := g.line(ctx, "rev-parse", "-q", "--verify", ref)
		switch {
		case cerr == nil && cur == res.Result:
			// Made by an earlier fetch of this result.
		case cerr == nil && cur != "":
			return nil, fmt.Errorf("%w: %s is at %s, the run's result is %s; nothing was changed", ErrBranchExists, branch, cur, res.Result)
		default:
			return nil, fmt.Errorf("make the branch %s: %w", branch, err)
		}
	}
	imp := &Imported{Branch: branch, Commit: res.Result}
	imp.Descends, imp.Commits = ancestry(ctx, g, base, res.Result)
	return imp, nil
}

// ancestry says, in one walk, whether commit descends from base and how
// many commits it has that base has not.
func ancestry(ctx context.Context, g git, base, commit string) (descends bool, commits int) {
	if base == "" {
		n, _ := g.line(ctx, "rev-list", "--count", commit)
		commits, _ = strconv.Atoi(n)
		return true, commits
	}
	out, err := g.line(ctx, "rev-list", "--left-right", "--count", base+"..."+commit)
	if err != nil {
		return false, 0
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return false, 0
	}
	behind, _ := strconv.Atoi(f[0])
	commits, _ = strconv.Atoi(f[1])
	return behind == 0, commits
}

// Diff is the patch (or, stat, the diffstat) from base to the result, as git
// shows it, with no external diff program and no text conversion.
func Diff(ctx context.Context, root, base, commit string, stat bool) ([]byte, error) {
	from := base
	if from == "" {
		from = emptyTree
	}
	args := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-color"}
	if stat {
		args = append(args, "--stat")
	}
	args = append(args, from, commit, "--")
	out, err := git{dir: root}.out(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ShortStat is one line saying how much changed.
func ShortStat(ctx context.Context, root, base, commit string) string {
	from := base
	if from == "" {
		from = emptyTree
	}
	s, err := git{dir: root}.line(ctx, "diff", "--no-ext-diff", "--shortstat", from, commit, "--")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}
