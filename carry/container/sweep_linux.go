package container

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Sweep removes containers postern started whose controlling postern is gone
// (the harness normally ends them itself when its host goes away; this catches
// what an engine failed to remove). It returns the first error met.
func Sweep(ctx context.Context, e *Engine) error {
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
	return start != 0 && processStart(pid) == start
}
