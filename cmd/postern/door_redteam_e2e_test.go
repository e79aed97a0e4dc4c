//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// Ways out through the door itself, each attempted from inside the wall of
// the built binary, with the hosts recording what reaches them.
func TestDoorRedTeamFromInsideTheWall(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	l := newWallLab(t)
	p := l.poster(t)
	web := l.Web.Addr.As4()
	other := l.Other.Addr.As4()
	hex4 := func(b [4]byte) string { return fmt.Sprintf("%02x%02x:%02x%02x", b[0], b[1], b[2], b[3]) }
	mark := "redteam-" + randHex(4)

	// IPv6 forms carrying the web host's IPv4 address, which the policy
	// opens by its IPv4 CIDR: dialled as IPv6 they would go wherever the host
	// routes them (a 6to4 relay, a NAT64 gateway), so the CIDR must not open
	// them.
	forms := map[string]string{
		"6to4":     fmt.Sprintf("2002:%s::1", hex4(web)),
		"nat64":    fmt.Sprintf("64:ff9b::%s", hex4(web)),
		"compat":   fmt.Sprintf("::%s", hex4(web)),
		"siit":     fmt.Sprintf("::ffff:0:%s", hex4(web)),
		"teredo":   fmt.Sprintf("2001:0:4136:e378:8000:63bf:%s", hex4([4]byte{^web[0], ^web[1], ^web[2], ^web[3]})),
		"nat64-80": fmt.Sprintf("64:ff9b::%s", hex4(other)),
	}
	var script strings.Builder
	for name, a := range forms {
		if _, err := netip.ParseAddr(a); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		script.WriteString(curlStep("v6-"+name, "-g", fmt.Sprintf("http://[%s]:80/%s-%s", a, mark, name)))
	}
	// The IPv4-mapped form is the IPv4 address itself: it goes through, to
	// the IPv4 address.
	script.WriteString(curlStep("mapped", "-g", fmt.Sprintf("http://[::ffff:%s]:80/%s-mapped", l.Web.Addr, mark)))

	// On port 80 only HTTP/1.x passes: not HTTP/2's preface, not a lowercase
	// method, not TLS.
	send := func(name, bytes string) {
		script.WriteString(step(name, fmt.Sprintf("printf %s | socat -T3 - TCP:web.test:80", sh(bytes))))
	}
	send("h2c-preface", "PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n")
	send("lowercase", "get /"+mark+"-lower HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n")
	// Absolute-form fronting on an allowed connection: a second request
	// naming another host (by name and by address) with the allowed Host.
	send("fronting", "GET /"+mark+"-first HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n"+
		"GET http://other.test/"+mark+"-fronted HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n")
	send("fronting-ip", "GET /"+mark+"-first2 HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n"+
		"GET http://"+l.Other.Addr.String()+"/"+mark+"-fronted-ip HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n")

	w := p.run(t, l.flags(t), script.String())
	for name := range forms {
		out := w.Out(t, "v6-"+name)
		if code := httpCode(out); code != 403 {
			t.Errorf("%s form %s: http %d, want the door's 403\n%s", name, forms[name], code, out)
		}
	}
	if out := w.Out(t, "mapped"); httpCode(out) != 200 {
		t.Errorf("the IPv4-mapped form of an allowed address: %s", out)
	}
	if hits := l.Hits.with(mark + "-mapped"); len(hits) != 1 || hits[0].Server != "web" {
		t.Errorf("the mapped form reached %+v, want web once", hits)
	}
	for name, forbidden := range map[string][]string{
		"h2c-preface": nil,
		"lowercase":   {mark + "-lower"},
		"fronting":    {mark + "-fronted"},
		"fronting-ip": {mark + "-fronted-ip"},
	} {
		out := w.Out(t, name)
		if name == "fronting" || name == "fronting-ip" {
			if !strings.Contains(out, "HTTP/1.1 200") || !strings.Contains(out, "HTTP/1.1 403") {
				t.Errorf("%s: want the first request answered and the second refused:\n%s", name, out)
			}
		} else if strings.Contains(out, "HTTP/") {
			t.Errorf("%s on port 80 was answered:\n%s", name, out)
		}
		for _, f := range forbidden {
			if hits := l.Hits.with(f); len(hits) != 0 {
				t.Errorf("%s: %s reached %+v", name, f, hits)
			}
		}
	}
	if len(l.Hits.with(mark+"-first")) != 2 {
		t.Errorf("the allowed first requests did not both arrive: %+v", l.Hits.with(mark+"-first"))
	}
	for name := range forms {
		if hits := l.Hits.with(mark + "-" + name); len(hits) != 0 {
			t.Errorf("the %s form reached %+v", name, hits)
		}
	}
	if _, ok := w.Events.find(func(e door.Event) bool {
		return e.Kind == "transparent" && e.Decision == "deny" && strings.Contains(e.Reason, "not an http/1.x request")
	}); !ok {
		t.Errorf("no event records the refusal of non-HTTP/1 bytes on port 80\n%s", w)
	}
}
