package dispatch

import (
	"os"
	"path/filepath"

	"github.com/postern-dev/postern/records"
)

// neverWritable are postern's own places on this machine: the directory of
// its records. (The running binary itself is guarded by the carry.)
func neverWritable() []string {
	if p, err := records.DefaultPath(); err == nil {
		return []string{filepath.Dir(p)}
	}
	return nil
}

// agentDir is the directory of the running agent: on a remote machine, the
// run may not change what the controller starts there next.
func agentDir() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	return []string{filepath.Dir(self)}
}

// agentInitDir is where a remote run's network wall keeps its init: beside
// the agent, which the run may not write.
func agentInitDir() string {
	if d := agentDir(); len(d) > 0 {
		return filepath.Join(d[0], "lib")
	}
	return ""
}
