package door

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/postern-dev/postern/door/policy"
)

// denyText is the body of a refusal: what was denied, why, under which policy,
// and what would allow it, in words a person or a model can act on.
func (d *Door) denyText(what string, j Judgement) string {
	pol := d.policyOf(j)
	var b strings.Builder
	fmt.Fprintf(&b, "postern door denied %s\n", what)
	fmt.Fprintf(&b, "destination: %s", targetString(j.Host, j.Port))
	if j.Addr.IsValid() && (j.Host.Name != "" || j.Addr != j.Host.Addr) {
		fmt.Fprintf(&b, " (address %s)", j.Addr)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "reason: %s\n", j.Decision.Reason)
	if j.Decision.Rule != "" {
		fmt.Fprintf(&b, "rule: %s\n", j.Decision.Rule)
	}
	src := pol.Source
	if src == "" {
		src = "(built-in)"
	}
	fmt.Fprintf(&b, "policy: %s (mode %s)\n", src, pol.Mode)
	switch {
	case j.Decision.Sealed:
		b.WriteString("no policy line opens it while the seal is held: send the request to the guardrail named above, which reaches the host itself\n")
	case j.Decision.Floor:
		b.WriteString("nothing can allow it: this destination is on the hard floor, which no policy opens\n")
	case j.Decision.Reason == policy.ReasonDeniedByRule:
		b.WriteString("the policy denies it on purpose: no allow line overrides a deny rule\n")
	default:
		target := j.Host
		if j.Addr.IsValid() && j.Decision.Reason == policy.ReasonPrivate {
			target = policy.Host{Addr: j.Addr} // a private address opens only by its CIDR
		}
		if j.as != nil {
			b.WriteString(clientSuggest(pol, target, j.Port, j.as.Name))
		} else if s := pol.Suggest(target, j.Port); s != "" {
			fmt.Fprintf(&b, "to allow it, add to %s:\n", src)
			for _, line := range strings.Split(s, "\n") {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
	}
	return b.String()
}

// headDenyText is the body of a refusal made on a connection's first bytes.
func (d *Door) headDenyText(what string, j Judgement, reason string) string {
	pol := d.policyOf(j)
	src := pol.Source
	if src == "" {
		src = "(built-in)"
	}
	return fmt.Sprintf("postern door denied %s\ndestination: %s\nreason: %s\npolicy: %s (mode %s)\n"+
		"the connection was admitted for %s only: address requests to that host, or open a new connection to the host you mean\n",
		what, targetString(j.Host, j.Port), reason, src, pol.Mode, hostString(j.Host))
}

// decisionHeader is the X-Postern-Decision value for a refusal.
func decisionHeader(reason string) string {
	return "deny; reason=" + strconv.Quote(reason)
}

// writeDenied writes a complete HTTP 403 response carrying text.
func writeDenied(c io.Writer, reason, text string, closeAfter bool) error {
	return writeStatus(c, 403, "Forbidden", text, closeAfter, "X-Postern-Decision: "+decisionHeader(reason))
}

// writeStatus writes a complete plain-text HTTP/1.1 response.
func writeStatus(c io.Writer, code int, status, text string, closeAfter bool, extra ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, status)
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n", len(text))
	for _, h := range extra {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	if closeAfter {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(text)
	_, err := io.WriteString(c, b.String())
	return err
}
