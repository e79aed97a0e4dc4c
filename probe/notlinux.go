//go:build !linux

package probe

import (
	"context"
	"fmt"
	"runtime"

	"github.com/postern-dev/postern/probe/rung"
)

// notLinuxRungs are the rungs named, each answering no because this system
// is not Linux: there is nothing to measure.
func notLinuxRungs(names ...rung.Name) []measurement {
	notLinux := func(ctx context.Context) Rung {
		return no(fmt.Sprintf("%s is not Linux", runtime.GOOS), "")
	}
	out := make([]measurement, 0, len(names))
	for _, n := range names {
		out = append(out, measurement{n, notLinux})
	}
	return out
}
