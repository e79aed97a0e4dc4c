package event

import "time"

// Type says what an Event reports.
type Type string

const (
	// Decided is an attempt the door (or the wall) judged.
	Decided Type = "decision"
	// Ended is the end of an admitted connection: BytesUp, BytesDown and
	// DurationMS are set.
	Ended Type = "end"
)

// Kind is how an attempt reached the door.
type Kind string

const (
	// Connect is an explicit CONNECT.
	Connect Kind = "connect"
	// HTTP is an explicit absolute-URI request.
	HTTP Kind = "http"
	// Transparent is a connection the wall redirected to the door.
	Transparent Kind = "transparent"
	// DNS is a lookup inside the wall.
	DNS Kind = "dns"
	// Wall is a refusal by the wall itself: a port or protocol that does not
	// lead to the door.
	Wall Kind = "wall"
	// Request is one request on a connection to a host the policy inspects.
	Request Kind = "request"
)

// Decision is the verdict an event records.
type Decision string

const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
)

// Event is one judged connection attempt, or the end of an admitted one. It never
// carries payload. Field names are the door's canonical log line and are stable.
type Event struct {
	Time time.Time `json:"time"`
	// Event is Decided when the door judged an attempt, Ended when an admitted
	// connection closed (then BytesUp, BytesDown and DurationMS are set).
	Event Type   `json:"event"`
	Run   string `json:"run,omitempty"`
	Conn  uint64 `json:"conn"` // ties a decision to its end
	// Kind is how the attempt reached the door.
	Kind      Kind     `json:"kind"`
	Host      string   `json:"host"`
	Port      uint16   `json:"port,omitempty"`
	Addr      string   `json:"addr,omitempty"` // the address dialled, if any
	Decision  Decision `json:"decision"`
	Mode      string   `json:"mode"` // "enforce" or "observe"
	Reason    string   `json:"reason"`
	Rule      string   `json:"rule,omitempty"`
	WouldDeny bool     `json:"would_deny,omitempty"` // observe mode: enforce would deny
	// Client is the gateway client the connection belongs to (the name its
	// proxy credentials gave); Peer is the address it came from.
	Client     string `json:"client,omitempty"`
	Peer       string `json:"peer,omitempty"`
	BytesUp    int64  `json:"bytes_up,omitempty"`
	BytesDown  int64  `json:"bytes_down,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// Method and Path are the request a Request decision judged: a
	// request inside a connection to a host the policy inspects. Path is
	// the normalised path the door forwards, without its query; bodies and
	// headers are never recorded.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Repeats counts the decisions like this one (same kind, host, query
	// type or port, and decision) that the door made in the quiet second
	// before it and did not record one by one: the event stands for
	// Repeats+1 decisions. Lookups inside the wall and the wall's own
	// refusals are recorded at most once a second each.
	Repeats int `json:"repeats,omitempty"`
	// JudgeNS is how long the judgement took, in nanoseconds (the name and
	// every address it resolved to); set for a gateway client's decisions.
	JudgeNS int64 `json:"judge_ns,omitempty"`
}

// Denied reports whether e is a decision that refused the attempt.
func (e Event) Denied() bool { return e.Event == Decided && e.Decision == Deny }

// Allowed reports whether e is a decision that admitted the attempt.
func (e Event) Allowed() bool { return e.Event == Decided && e.Decision == Allow }
