package door

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// requestDenyText is the body of a refused request inside an inspected (or
// plain-HTTP) connection: what was refused, why, which rule, and what to
// change, in words a person or a model can act on.
func (d *Door) requestDenyText(what, host string, port uint16, dec policy.Decision, fix string) string {
	pol := d.policy()
	src := pol.Source
	if src == "" {
		src = "(built-in)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "postern door denied %s on %s\n", what, targetString(policy.Host{Name: host}, port))
	fmt.Fprintf(&b, "reason: %s\n", dec.Reason)
	if dec.Rule != "" {
		fmt.Fprintf(&b, "rule: %s\n", dec.Rule)
	}
	fmt.Fprintf(&b, "policy: %s (mode %s)\n", src, pol.Mode)
	if fix != "" {
		b.WriteString(fix)
		b.WriteString("\n")
	}
	return b.String()
}

// requestFix says what would let a refused request through.
func requestFix(pol *policy.Policy, r *policy.InspectRule, method, norm string, dec policy.Decision) string {
	src := pol.Source
	if src == "" {
		src = "the policy"
	}
	switch dec.Reason {
	case policy.ReasonPathDenied:
		return "the policy denies it on purpose: no allow_paths entry overrides a deny_paths entry"
	case policy.ReasonMethodNotAllowed:
		return fmt.Sprintf("to allow it, change allow_methods at %s in %s to:\n  %s", r.MethodsPos, src, pol.SuggestRequest(r, method, norm))
	case policy.ReasonPathNotAllowed:
		return fmt.Sprintf("to allow it, change allow_paths at %s in %s to:\n  %s", r.AllowPathsPos, src, pol.SuggestRequest(r, method, norm))
	}
	return ""
}

// refusedByInspect holds a plain-HTTP request for an inspected host (named
// by the connection's judgement, or by authority on a connection admitted by
// address) to that host's request rules, exactly as an inspected HTTPS
// request is held; injected headers are never added to it. A refused
// request is answered and recorded, and refusedByInspect reports true. An
// admitted one goes on with its target rewritten to the path that was
// judged.
func (s *httpSession) refusedByInspect(req *http.Request, j Judgement, authority string, id uint64, kind event.Kind, closeAfter bool) bool {
	d := s.d
	name, rule := d.inspection(j, authority)
	if rule == nil {
		return false
	}
	raw := req.RequestURI
	if !strings.HasPrefix(raw, "/") && raw != "*" {
		raw = req.URL.EscapedPath()
	}
	query, hasQuery := "", false
	if i := strings.IndexByte(req.RequestURI, '?'); i >= 0 {
		query, hasQuery = req.RequestURI[i+1:], true
	}
	norm, err := policy.NormalisePath(raw)
	path := policy.EscapePath(norm)
	if err != nil {
		path = ""
	}
	ev := func(dec policy.Decision) Event {
		ev := Event{Event: "decision", Conn: id, Kind: "request", Host: name, Port: j.Port,
			Decision: decisionOf(dec.Verdict), Reason: dec.Reason, Rule: dec.Rule, WouldDeny: dec.WouldDeny,
			Method: req.Method, Path: path, Client: s.c.RemoteAddr().String()}
		return ev
	}
	pol := d.policy()
	if err != nil {
		dec := policy.Decision{Verdict: policy.Deny, Reason: policy.ReasonBadPath, Rule: inspectRef(rule)}
		d.emit(ev(dec))
		dec.Reason = fmt.Sprintf("%s: %v", policy.ReasonBadPath, err)
		s.denied(policy.ReasonBadPath, d.requestDenyText(req.Method+" (unreadable path)", name, j.Port, dec, "send the path percent-encoded, without control characters"), closeAfter)
		return true
	}
	dec := pol.DecideRequest(rule, req.Method, norm)
	d.emit(ev(dec))
	if dec.Verdict != policy.Allow {
		s.denied(dec.Reason, d.requestDenyText(req.Method+" "+path, name, j.Port, dec, requestFix(pol, rule, req.Method, norm, dec)), closeAfter)
		return true
	}
	req.RequestURI = path
	if hasQuery {
		req.RequestURI += "?" + query
	}
	return false
}
