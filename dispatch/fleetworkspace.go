package dispatch

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/postern-dev/postern/records"
)

// A dispatch started inside a git work tree gives each attempt a copy of the
// work of its own and brings its result home as branch postern/RUN
// (DESIGN.md, "Workspaces"): two tasks never share a work tree, local ones
// included.

// attemptWorkspace sets the workspace of an attempt's run: a remote run
// takes the work tree along as any run does (WorkspaceAuto); a local one, in
// a dispatch started in a git work tree, works in a fresh copy of it
// (WorkspaceCopy) rather than in the work tree itself.
func attemptWorkspace(spec *Spec, local, inWorkTree bool) {
	if local && inWorkTree && spec.Workspace.Mode == "" {
		spec.Workspace.Mode = WorkspaceCopy
	}
}

// resultBranch is the branch a run's result came home as, if any.
func resultBranch(run *records.Run) string {
	if run.Workspace == nil {
		return ""
	}
	return run.Workspace.ResultBranch
}

// InWorkTree reports whether dir is inside a git work tree, by git's own
// answer.
func InWorkTree(ctx context.Context, dir string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--is-inside-work-tree").Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}
