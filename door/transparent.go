package door

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

// serveTransparent serves one connection the wall redirected to the door. Its
// original destination is a fake address the door's DNS handed out for one
// name, or a literal address. On ports 80 and 443 the client speaks first, so
// its first bytes are read (bounded) and checked before anything is dialled;
// on other ports the door connects first so server-speaks-first protocols
// work, and checks the client's first bytes when they come.
func (d *Door) serveTransparent(ctx context.Context, c net.Conn) {
	id := d.connID.Add(1)
	start := time.Now()
	dst, err := d.origDst(c)
	if err != nil {
		j := Judgement{Decision: policy.Decision{Verdict: policy.Deny, Reason: fmt.Sprintf("cannot read original destination: %v", err)}}
		d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	port := dst.Port()
	host := policy.Host{Addr: dst.Addr()}
	if g, _ := d.policy().GuardrailAt(dst.Addr()); g != nil {
		// Decide sends it to the guardrail: not a name of the DNS side's.
	} else if isFake(dst.Addr()) {
		name, ok := d.fakes.name(dst.Addr())
		if !ok {
			j := Judgement{Host: host, Port: port, Addr: dst.Addr(), Decision: policy.Decision{Verdict: policy.Deny, Floor: true,
				Reason: fmt.Sprintf("address %s is in the door's fake range but was never handed out by its dns", dst.Addr())}}
			d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
			return
		}
		host = policy.Host{Name: name}
	}

	if d.cfg.Upstream != nil {
		d.serveTransparentUpstream(ctx, c, id, start, host, port)
		return
	}
	// An inspected host's first bytes are read before anything is dialled on
	// every port: they decide whether its TLS is terminated.
	inspected := d.inspectsName(host)
	clientFirst := port == 80 || port == 443 || inspected
	rules := headRules{tlsOnly: port == 443, httpOnly: port == 80, inspected: inspected}
	var (
		head   []byte
		fb     firstBytes
		herr   error
		peeked bool
	)
	j := d.Decide(ctx, host, port)
	what := "connection to " + targetString(host, port)
	if !j.Allowed() {
		d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
		if port == 80 {
			// Plain HTTP gets a refusal it can read; anything else a close.
			if _, fb, herr := readHead(c, nil, time.Now().Add(peekTimeout)); fb.kind == headHTTP && herr == nil {
				writeDenied(c, j.Decision.Reason, d.denyText(what, j), true)
			}
		}
		return
	}
	if clientFirst {
		head, fb, herr = readHead(c, nil, time.Now().Add(peekTimeout))
		peeked = true
		if d.judgeHead(id, "transparent", c, j, fb, herr, rules) {
			if fb.kind == headHTTP && herr == nil {
				reason := d.checkHead(j, fb, herr, rules)
				writeDenied(c, reason, d.headDenyText(what, j, reason), true)
			}
			return
		}
	}
	up, addr, err := d.dialJudged(ctx, j)
	j.Addr = addr
	d.emit(d.decisionEvent(id, event.Transparent, c.RemoteAddr(), j))
	if err != nil {
		if peeked && fb.kind == headHTTP {
			writeStatus(c, 502, "Bad Gateway", fmt.Sprintf("postern door admitted %s but could not connect: %v\n", what, err), true)
		}
		d.emitEnd(id, event.Transparent, j, 0, 0, start, "dial failed: "+err.Error())
		return
	}
	d.track(up)
	defer d.untrack(up)

	var upN, downN int64
	denied := false
	if peeked && fb.kind == headTLS && herr == nil {
		if name, rule := d.inspection(j, fb.name); rule != nil {
			upN, downN = d.serveInspected(ctx, c, up, addr, j, id, "transparent", name, rule, head)
			d.emitEnd(id, event.Transparent, j, upN, downN, start, "closed")
			return
		}
	}
	if peeked && fb.kind == headHTTP && herr == nil {
		// Plain HTTP: every request on the connection is held to the admitted
		// host, not just the first.
		upN, downN = d.servePinnedHTTP(ctx, c, up, addr, j, id, "transparent", head)
		d.emitEnd(id, event.Transparent, j, upN, downN, start, "closed")
		return
	}
	if peeked {
		if _, err := up.Write(head); err != nil {
			d.emitEnd(id, event.Transparent, j, 0, 0, start, "upstream write failed")
			return
		}
		upN = int64(len(head))
		head = nil
		downc := make(chan int64, 1)
		go func() { downc <- pump(c, up) }()
		upN += pump(up, c)
		downN = <-downc
	} else {
		upN, downN, denied = d.pipe(c, up, nil, func(fb firstBytes, herr error) bool {
			return d.judgeHead(id, "transparent", c, j, fb, herr, rules)
		}, func(head []byte) (int64, int64) {
			return d.servePinnedHTTP(ctx, c, up, addr, j, id, "transparent", head)
		}, d.inspectTLS(ctx, c, up, addr, j, id, "transparent"))
	}
	reason := "closed"
	if denied {
		reason = "refused on first bytes"
	}
	d.emitEnd(id, event.Transparent, j, upN, downN, start, reason)
}
