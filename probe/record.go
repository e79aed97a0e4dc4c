package probe

import "github.com/postern-dev/postern/probe/rung"

// What a probe measures, as data, lives in package rung so that the records
// and carry.Choose can read it without the measurements; these names keep
// the probe's own code reading as before.
type (
	Record = rung.Record
	Rung   = rung.Rung
	Result = rung.Result
)

const (
	Yes = rung.Yes
	No  = rung.No

	RungUserns              = rung.Userns
	RungNetns               = rung.Netns
	RungNetnsRedirect       = rung.NetnsRedirect
	RungIPv6                = rung.IPv6
	RungLandlock            = rung.Landlock
	RungSeatbeltNetworkDeny = rung.SeatbeltNetworkDeny
	RungContainer           = rung.Container
	RungOverlay             = rung.Overlay
	RungGPU                 = rung.GPU
)
