package dispatch

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/postern-dev/postern/records"
)

// A dispatch started inside a git work tree gives each attempt a copy of the
// work of its own and brings its result home as a branch (DESIGN.md,
// "Workspaces"). These two functions are where a dispatch meets the
// workspaces: attemptWorkspace chooses an attempt's workspace, resultBranch
// reads the branch its run brought home (RunExited's Branch). Until runs
// carry workspaces, an attempt runs where 'postern run' would, and brings
// no branch.

// attemptWorkspace sets the workspace of an attempt's run, for a dispatch
// started in a git work tree (inWorkTree).
func attemptWorkspace(spec *Spec, inWorkTree bool) {
	_ = spec
	_ = inWorkTree
}

// resultBranch is the branch a run's result came home as, if any.
func resultBranch(run *records.Run) string {
	_ = run
	return ""
}

// InWorkTree reports whether dir is inside a git work tree, by git's own
// answer.
func InWorkTree(ctx context.Context, dir string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--is-inside-work-tree").Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}
