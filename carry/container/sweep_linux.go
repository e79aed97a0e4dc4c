package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/postern-dev/postern/internal/procstat"
)

// dirPrefix starts the name of the host directory each container gets (its
// control socket, its resolv.conf), followed by the owner's pid.start.
const dirPrefix = "postern-container-"

// Sweep removes containers postern started whose controlling postern is gone
// (the harness normally ends them itself when its host goes away; this catches
// what an engine failed to remove), and the host directories such a postern
// left behind. It returns the first error met. It is for a clean-up a person
// asks for: a controller in another pid namespace looks gone from here.
func Sweep(ctx context.Context, e *Engine) error {
	sweepDirs()
	out, err := e.output(ctx, "ps", "--all", "--quiet", "--no-trunc", "--filter", "label="+LabelRun)
	if err != nil {
		return fmt.Errorf("list postern's containers: %w", err)
	}
	var firstErr error
	for _, id := range strings.Fields(string(out)) {
		labels, err := e.output(ctx, "inspect", "--format",
			`{{index .Config.Labels "`+LabelPid+`"}} {{index .Config.Labels "`+LabelPidStart+`"}}`, id)
		if err != nil {
			continue // it went away meanwhile
		}
		f := strings.Fields(string(labels))
		if len(f) == 2 && controllerAlive(f[0], f[1]) {
			continue
		}
		if _, err := e.output(ctx, e.removeArgs(id)...); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("remove stale container %s: %w", id, err)
		}
	}
	return firstErr
}

func controllerAlive(pidLabel, startLabel string) bool {
	pid, err := strconv.Atoi(pidLabel)
	if err != nil || pid <= 0 {
		return false
	}
	start, err := strconv.ParseUint(startLabel, 10, 64)
	if err != nil {
		return false
	}
	return start != 0 && procstat.StartTime(pid) == start
}

// sweepDirs removes the host directories of containers whose postern is gone
// (killed before it could remove them).
func sweepDirs() {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, ent := range ents {
		rest, ok := strings.CutPrefix(ent.Name(), dirPrefix)
		if !ok || !ent.IsDir() {
			continue
		}
		owner, _, ok := strings.Cut(rest, "-")
		pid, start, ok2 := strings.Cut(owner, ".")
		if !ok || !ok2 || controllerAlive(pid, start) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(os.TempDir(), ent.Name()))
	}
}
