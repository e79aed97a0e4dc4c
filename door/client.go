package door

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// Client is whom a gateway's connection belongs to: the name its proxy
// credentials gave, and the policy its requests are judged by. The policy
// must floor the gateway's own addresses (Policy.WithSelf with ListenerAddrs).
type Client struct {
	Name   string
	Policy *policy.Policy
}

// AuthError is a request whose proxy credentials are missing or wrong. Client
// is the name the credentials claimed, if any; Reason says what was wrong.
type AuthError struct {
	Client string
	Reason string
}

func (e *AuthError) Error() string {
	if e.Client == "" {
		return "proxy authentication: " + e.Reason
	}
	return fmt.Sprintf("proxy authentication as %q: %s", e.Client, e.Reason)
}

// ListenerAddrs are the addresses the listeners are bound to (every address
// of this host for one on an unspecified address): what a policy floors as
// the door's own.
func ListenerAddrs(ls Listeners) []netip.Addr { return selfAddrs(ls) }

// decideFor judges a destination for a gateway client by its policy, timing
// the judgement; with no client, by the door's policy.
func (d *Door) decideFor(ctx context.Context, as *Client, h policy.Host, port uint16) Judgement {
	if as == nil {
		return d.decide(ctx, d.policy(), h, port)
	}
	start := time.Now()
	j := d.decide(ctx, as.Policy, h, port)
	j.as = as
	j.took = time.Since(start)
	return j
}

// policyOf is the policy j was judged by.
func (d *Door) policyOf(j Judgement) *policy.Policy {
	if j.as != nil {
		return j.as.Policy
	}
	return d.policy()
}

// authenticate asks cfg.Authenticate about one request on the explicit proxy
// and holds the connection to the first client it named: a kept connection
// never changes hands. It answers a refusal itself and reports whether the
// request may go on.
func (s *httpSession) authenticate(req *http.Request) bool {
	d := s.d
	as, err := d.cfg.Authenticate(req)
	if err == nil && as == nil {
		err = &AuthError{Reason: "no client"}
	}
	if err == nil && s.as != nil && as.Name != s.as.Name {
		err = &AuthError{Client: as.Name, Reason: fmt.Sprintf("this connection belongs to client %q; open a new connection for another client", s.as.Name)}
	}
	if err == nil {
		s.as = as
		return true
	}
	claimed := ""
	var ae *AuthError
	if errors.As(err, &ae) {
		claimed = ae.Client
	}
	kind, target, port := event.HTTP, req.URL.Host, uint16(80)
	if req.Method == http.MethodConnect {
		kind, target, port = event.Connect, req.RequestURI, 443
	}
	h, p, herr := policy.SplitTarget(target, port)
	if herr != nil {
		h, p = policy.Host{Name: target}, 0
	}
	reason := err.Error()
	j := Judgement{Host: h, Port: p, Decision: policy.Decision{Verdict: policy.Deny, Reason: reason}}
	ev := d.decisionEvent(d.connID.Add(1), kind, s.c.RemoteAddr(), j)
	ev.Client = claimed
	d.emit(ev)
	text := fmt.Sprintf("postern gateway refused %s %s\nreason: %s\n"+
		"send the client's name and token as proxy credentials, e.g. HTTPS_PROXY=http://NAME:TOKEN@gateway:3128\n", req.Method, target, reason)
	s.status(http.StatusProxyAuthRequired, "Proxy Authentication Required", text, true,
		`Proxy-Authenticate: Basic realm="postern"`, "X-Postern-Decision: "+decisionHeader(reason))
	return false
}

// clientSuggest is how a gateway client's denial says what would allow it:
// the change to that client's policy, as the gateway's API takes it.
func clientSuggest(pol *policy.Policy, h policy.Host, port uint16, client string) string {
	s := pol.Suggest(h, port)
	if s == "" {
		return ""
	}
	patch := map[string]any{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " = ")
		if !ok {
			continue
		}
		var vals []any
		if json.Unmarshal([]byte(v), &vals) != nil {
			continue
		}
		switch k {
		case "allow":
			patch["add_allow"] = vals
		case "allow_cidrs":
			patch["add_cidrs"] = vals
		case "ports":
			patch["ports"] = vals
		}
	}
	body, _ := json.Marshal(patch)
	return fmt.Sprintf("to allow it for client %s, the gateway's operator can send PATCH /v1/clients/%s/policy %s\n", client, client, body)
}
