package policy

import (
	"net/netip"
)

// Mode says whether a policy's denials are enforced or only recorded.
type Mode uint8

const (
	modeInvalid Mode = iota
	// Enforce refuses what the policy denies.
	Enforce
	// Observe allows everything the hard floor allows and records what Enforce
	// would have denied.
	Observe
)

func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Observe:
		return "observe"
	}
	return "invalid"
}

// Verdict is the outcome of judging one destination. Its zero value is invalid so
// that a Decision nobody filled in can never read as an allow.
type Verdict uint8

const (
	verdictInvalid Verdict = iota
	Allow
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return "invalid"
}

// Decision is one judgement: the verdict, why, and the rule that matched.
type Decision struct {
	Verdict Verdict
	// Reason is a short machine-stable phrase, e.g. "allowed by rule",
	// "denied by rule", "no allow rule matches", "hard floor: loopback".
	Reason string
	// Rule is the policy text that matched ("github.com", "10.20.0.0/16"), with its
	// position ("policy.hcl:4:11"), or "" when no rule matched.
	Rule string
	// Floor is set when the hard floor decided; observe mode never opens it.
	Floor bool
	// WouldDeny is set in observe mode when enforce would have denied.
	WouldDeny bool
	// Sealed is set when a guardrail seals the host; observe mode never
	// opens it.
	Sealed bool
}

// HostRule is one allow or deny entry: a name covering itself and its subdomains,
// optionally restricted to one port.
type HostRule struct {
	Name string // canonical: lowercase, no trailing dot, punycode
	Port uint16 // 0: any port the policy's ports list admits
	Text string // as written in the policy
	Pos  string // "file:line:col"
	// Wildcard is set for "*.name": the rule covers the subdomains of Name but
	// not Name itself.
	Wildcard bool

	ref string // Text and Pos as Decision.Rule reports them, built once
}

// Policy is a compiled policy.
type Policy struct {
	Source     string // file name it was parsed from ("" for built-ins)
	Name       string // optional description, the policy's `name` attribute
	Mode       Mode
	Ports      []uint16
	Allow      []HostRule
	Deny       []HostRule
	AllowCIDRs []CIDRRule
	// Inspect are the hosts whose TLS the door terminates, to judge each
	// request by method and path and to add headers (see InspectRule).
	Inspect []InspectRule

	// What the run may do with the host's files and processes (see files.go).
	Writable  []PathRule // written for real; DefaultWritable unless the policy says
	DenyRead  []PathRule // masked: DefaultDenyRead and the policy's
	AllowRead []PathRule // exempt from DenyRead: DefaultAllowRead and the policy's
	PidsLimit int        // processes and threads at once; DefaultPidsLimit unless the policy says

	// Guardrails are the registered processes outside the wall and the hosts
	// each seals (see Guardrail).
	Guardrails []Guardrail

	self   []netip.Addr // the door's own addresses, floored; see WithSelf
	sealed bool         // the guardrails' hosts are denied; see Sealing
}

// CIDRRule is one allow_cidrs entry.
type CIDRRule struct {
	Prefix netip.Prefix
	Text   string
	Pos    string

	ref string // Text and Pos as Decision.Rule reports them, built once
}

// Host is a canonical destination host: exactly one of Name and Addr is set.
type Host struct {
	Name string
	Addr netip.Addr
}
