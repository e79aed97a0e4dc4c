package dispatch

import (
	"github.com/postern-dev/postern/internal/procstat"
)

// Alive reports whether the controller recorded in a run is still running.
func controllerAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	// A controller that ended but was not reaped yet (its parent gone, and
	// the reaper slow or absent) keeps its start time: it is gone all the
	// same.
	return procstat.StartTime(pid) == start && start != 0 && !procstat.Exited(pid)
}
