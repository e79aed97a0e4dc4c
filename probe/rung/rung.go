package rung

import "time"

// Name names a rung: one capability, measured by performing the act.
type Name string

// The rungs.
const (
	Userns              Name = "userns"
	Netns               Name = "netns"
	NetnsRedirect       Name = "netns-redirect"
	IPv6                Name = "ipv6"
	Landlock            Name = "landlock"
	SeatbeltNetworkDeny Name = "seatbelt-network-deny"
	Container           Name = "container"
	// Overlay is the wall's private layers: an overlay with its upper on
	// tmpfs in the run's user namespace (copy-up, whiteouts, opaque
	// directories), and the mount calls that lay the run's places over the
	// sealed host (open_tree, move_mount, mount_setattr).
	Overlay Name = "overlay"
	// GPU is the GPUs a machine has: those its NVIDIA driver lists
	// (nvidia-smi -L), or, where nvidia-smi is not installed, the NVIDIA
	// device nodes that open. A task with needs = ["gpu"] goes to a machine
	// that measured yes (or that has a gpu label).
	GPU Name = "gpu"
)

// Result is a rung's outcome.
type Result string

const (
	Yes Result = "yes"
	No  Result = "no"
)

// Rung is one measured capability: what happened, and when it failed, the fix.
type Rung struct {
	Result Result `json:"result"`
	Detail string `json:"detail"`
	Remedy string `json:"remedy"`
}

// Record is everything measured about one machine at one time. It is written only
// by measuring: nothing builds one from a person's input.
type Record struct {
	Name       string        `json:"name"`
	OS         string        `json:"os"`
	Arch       string        `json:"arch"`
	Kernel     string        `json:"kernel"`
	OSVersion  string        `json:"os_version"` // macOS: its product version, e.g. 15.1
	Version    string        `json:"postern_version"`
	User       string        `json:"user"` // who measured: rungs differ for root and others
	MeasuredAt time.Time     `json:"measured_at"`
	TookMS     int64         `json:"took_ms"`
	Rungs      map[Name]Rung `json:"rungs"`
}

// Has reports whether the rung was measured and answered yes.
func (r *Record) Has(name Name) bool {
	if r == nil {
		return false
	}
	g, ok := r.Rungs[name]
	return ok && g.Result == Yes
}
