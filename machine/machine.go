package machine

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"time"
)

// Local is the machine postern itself runs on. It exists without being added.
const Local = "local"

// Lane names where a run would go.
type Lane string

// The lanes.
const (
	LaneLocalLinux     Lane = "local-linux"
	LaneLocalMacOS     Lane = "local-macos"
	LaneRemoteLinux    Lane = "remote-linux"
	LaneRemoteMacOS    Lane = "remote-macos"
	LaneLocalContainer Lane = "local-container"
)

// Machine is a target host and how to reach it. It never holds what the machine can
// do: that is only ever measured (see package probe).
type Machine struct {
	Name     string `json:"name"`
	SSH      string `json:"ssh,omitempty"` // ssh destination; empty for local
	Identity string `json:"identity,omitempty"`
	// AgentDir is where the remote agent is installed; "" is
	// ~/.cache/postern/agents on the machine.
	AgentDir string            `json:"agent_dir,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	AddedAt  time.Time         `json:"added_at,omitzero"`
	// PerMachine is how many runs of a dispatch the machine takes at once
	// ('postern machine label NAME --per-machine N', or per_machine in the
	// inventory); 0 leaves it to the tasks file.
	PerMachine int `json:"per_machine,omitempty"`
	// Env names variables every run on the machine is given, their values
	// taken from postern's environment at each run (never stored).
	Env []string `json:"env,omitempty"`
}

// ErrBadName is returned for machine names that cannot be used.
var ErrBadName = errors.New("bad machine name")

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) })

// CheckName reports whether name can name a machine.
func CheckName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("%w %q: use lowercase letters, digits, '.', '_' and '-', at most 63 characters", ErrBadName, name)
	}
	return nil
}

// IsLocal reports whether m is this machine.
func (m Machine) IsLocal() bool { return m.SSH == "" }

// Lane is where a run on m goes. goos is the machine's measured OS ("" if never
// measured: a remote machine is then taken to be Linux, the common case).
func (m Machine) Lane(goos string) Lane {
	if m.IsLocal() {
		if goos == "" {
			goos = runtime.GOOS
		}
		if goos == "darwin" {
			return LaneLocalMacOS
		}
		return LaneLocalLinux
	}
	if goos == "darwin" {
		return LaneRemoteMacOS
	}
	return LaneRemoteLinux
}

// LocalMachine is the machine named local.
func LocalMachine() Machine { return Machine{Name: Local} }
