package probe

import "time"

// Rung names. Each is one capability measured by performing the act.
const (
	RungUserns              = "userns"
	RungNetns               = "netns"
	RungNetnsRedirect       = "netns-redirect"
	RungIPv6                = "ipv6"
	RungLandlock            = "landlock"
	RungSeatbeltNetworkDeny = "seatbelt-network-deny"
	RungContainer           = "container"
	// RungOverlay is the wall's private layers: an overlay with its upper on
	// tmpfs in the run's user namespace (copy-up, whiteouts, opaque
	// directories), and the mount calls that lay the run's places over the
	// sealed host (open_tree, move_mount, mount_setattr).
	RungOverlay = "overlay"
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
	Name       string          `json:"name"`
	OS         string          `json:"os"`
	Arch       string          `json:"arch"`
	Kernel     string          `json:"kernel"`
	OSVersion  string          `json:"os_version"` // macOS: its product version, e.g. 15.1
	Version    string          `json:"postern_version"`
	User       string          `json:"user"` // who measured: rungs differ for root and others
	MeasuredAt time.Time       `json:"measured_at"`
	TookMS     int64           `json:"took_ms"`
	Rungs      map[string]Rung `json:"rungs"`
}

// Has reports whether rung was measured and answered yes.
func (r *Record) Has(rung string) bool {
	if r == nil {
		return false
	}
	g, ok := r.Rungs[rung]
	return ok && g.Result == Yes
}
