package door

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// Event is one judged connection attempt, or the end of an admitted one
// (package event). The door emits them; the alias keeps door.Event reading
// as the door's own output where it is handled.
type Event = event.Event

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

// decisionOf is the event's decision for a policy verdict.
func decisionOf(v policy.Verdict) event.Decision {
	return event.Decision(v.String())
}

// Close closes every listener that is set. A wall that opened them closes
// them with it.
func (l Listeners) Close() {
	if l.Transparent != nil {
		l.Transparent.Close()
	}
	if l.DNSUDP != nil {
		l.DNSUDP.Close()
	}
	if l.DNSTCP != nil {
		l.DNSTCP.Close()
	}
	if l.Proxy != nil {
		l.Proxy.Close()
	}
	if l.WallLog != nil {
		l.WallLog.Close()
	}
}
