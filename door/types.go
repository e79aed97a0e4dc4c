package door

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/postern-dev/postern/door/policy"
)

// Event is one judged connection attempt, or the end of an admitted one. It never
// carries payload. Field names are the door's canonical log line and are stable.
type Event struct {
	Time time.Time `json:"time"`
	// Event is "decision" when the door judged an attempt, "end" when an admitted
	// connection closed (then BytesUp, BytesDown and DurationMS are set).
	Event string `json:"event"`
	Run   string `json:"run,omitempty"`
	Conn  uint64 `json:"conn"` // ties a decision to its end
	// Kind is how the attempt reached the door: "connect" (explicit CONNECT),
	// "http" (explicit absolute-URI request), "transparent" (redirected by the
	// wall), "dns" (a lookup inside the wall), "wall" (refused by the wall
	// itself: a port or protocol that does not lead to the door), "request"
	// (one request on a connection to a host the policy inspects).
	Kind      string `json:"kind"`
	Host      string `json:"host"`
	Port      uint16 `json:"port,omitempty"`
	Addr      string `json:"addr,omitempty"` // the address dialled, if any
	Decision  string `json:"decision"`       // "allow" or "deny"
	Mode      string `json:"mode"`           // "enforce" or "observe"
	Reason    string `json:"reason"`
	Rule      string `json:"rule,omitempty"`
	WouldDeny bool   `json:"would_deny,omitempty"` // observe mode: enforce would deny
	// Client is the gateway client the connection belongs to (the name its
	// proxy credentials gave); Peer is the address it came from.
	Client     string `json:"client,omitempty"`
	Peer       string `json:"peer,omitempty"`
	BytesUp    int64  `json:"bytes_up,omitempty"`
	BytesDown  int64  `json:"bytes_down,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// Method and Path are the request a "request" decision judged: a
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

// Config is what a Door needs. Policy is required.
type Config struct {
	Policy *policy.Policy
	// Resolver is host:port of the DNS server for the door's own lookups; "" uses
	// the system resolver.
	Resolver string
	// AddHosts pins canonical names to addresses, as docker's --add-host does.
	AddHosts map[string][]netip.Addr
	// Emit receives every event. It is called from connection goroutines and must
	// not block for long.
	Emit func(Event)
	// Run is copied into every event.
	Run    string
	Logger *slog.Logger
	// DrainTimeout bounds how long open connections may go on once Run's context
	// is done. Zero means 5s.
	DrainTimeout time.Duration
	// DialTimeout bounds each upstream dial. Zero means 10s.
	DialTimeout time.Duration
	// Seal holds the policy's guardrails' seal: the hosts each guardrail
	// seals are denied, whatever else the policy says. Whether or not it is
	// held, a connection to the address the run has for a guardrail goes to
	// that guardrail.
	Seal bool
	// Authority signs the certificates the door shows clients of the hosts
	// the policy inspects. Nil makes one when the policy inspects any; a
	// run's wall must trust it (see NewAuthority).
	Authority *Authority
	// UpstreamRoots is a PEM file of certificate authorities the door
	// trusts, besides this machine's, when it verifies an inspected host.
	UpstreamRoots string
	// Authenticate, when set, makes the explicit proxy a gateway's: it is
	// asked about every request (each CONNECT, each absolute-URI request on
	// a kept connection), and the Client it names is judged by its own
	// policy, read afresh for each request. An error is answered with 407
	// and recorded as a denial (an *AuthError names the client that was
	// claimed). Nil: every request is judged by Policy, and nothing is asked.
	Authenticate func(*http.Request) (*Client, error)
	// Upstream, when set, is where every connection is sent on to, as a
	// CONNECT, instead of being judged by Policy: the upstream (a gateway)
	// judges. Policy then only gives the ports, and its floor is applied
	// to literal addresses; the DNS side admits every name.
	Upstream *Upstream
}

// Listeners are the sockets a Door serves. Any may be nil.
type Listeners struct {
	// Proxy serves the explicit proxy: HTTP CONNECT and absolute-URI HTTP.
	Proxy net.Listener
	// Transparent serves connections the wall redirected; the original
	// destination is read with SO_ORIGINAL_DST.
	Transparent net.Listener
	// DNSUDP and DNSTCP answer lookups from inside the wall.
	DNSUDP net.PacketConn
	DNSTCP net.Listener
	// WallLog carries the packets the wall refused (its nflog group's netlink
	// socket, opened inside the run's namespace): each becomes a "wall"
	// decision, so that a refusal the door never saw is recorded and
	// explained too. The door closes it when it stops.
	WallLog *os.File
	// Refused, when set, carries the TCP connects Landlock refuses before
	// the wall sees a packet (a destination whose port Landlock does not
	// allow): each becomes a "wall" decision too. Its sender closes it.
	Refused <-chan netip.AddrPort
}
