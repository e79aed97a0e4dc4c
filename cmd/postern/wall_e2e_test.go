//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// fakeV4 is the range the door's DNS hands addresses out of.
var fakeV4 = netip.MustParsePrefix("198.18.0.0/15")

// TestWallEscapes attempts every way out of the wall from inside a run, each in
// its own subtest with its own POSTERN_HOME, against one lab. Each attempt that
// must fail sits next to an allowed request that must work, so a broken wall
// or a broken lab cannot pass for a closed one.
func TestWallEscapes(t *testing.T) {
	testhosts.EndToEnd(t)
	l := newWallLab(t)

	// Every query that reached the resolver no run may use is a leak, whoever made it.
	t.Cleanup(func() {
		if q := l.Outside.Queries(); len(q) > 0 {
			t.Errorf("the outside resolver at %s was asked %q: a lookup left the wall", l.Outside.Addr, q)
		}
		if l.Upstream.Asked("secret.web.test") {
			t.Errorf("the door's resolver was asked secret.web.test, a name the policy denies")
		}
	})

	t.Run("AllowedNameOverHTTPAndHTTPSSubdomainAndDenyWins", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		w := p.run(t, l.flags(t),
			curlStep("http", "http://web.test/"+tag+"-plain")+
				curlStep("https", "--cacert", "ca.pem", "https://web.test/"+tag+"-tls")+
				curlStep("sub", "--cacert", "ca.pem", "https://api.web.test/"+tag+"-sub")+
				curlStep("deny", "--cacert", "ca.pem", "https://secret.web.test/"+tag+"-deny")+
				curlStep("deny-http", "http://secret.web.test/"+tag+"-deny"))
		if w.Code != 0 || w.Run.State != records.StateExited || w.Run.ExitCode == nil || *w.Run.ExitCode != 0 || w.Run.Carry != "network-wall" {
			t.Fatalf("run: %s", w)
		}
		for _, c := range []struct{ step, path, sni string }{{"http", "-plain", ""}, {"https", "-tls", "web.test"}, {"sub", "-sub", "api.web.test"}} {
			out := w.Out(t, c.step)
			if httpCode(out) != 200 || rc(t, out) != 0 {
				t.Errorf("%s: allowed request failed:\n%s\n%s", c.step, out, w)
				continue
			}
			rep := echo(t, strings.SplitN(out, "\nhttp=", 2)[0])
			if rep.ServedBy != "web" || rep.SNI != c.sni || !strings.HasSuffix(rep.URI, c.path) {
				t.Errorf("%s: reached %+v", c.step, rep)
			}
		}
		for _, st := range []string{"deny", "deny-http"} {
			out := w.Out(t, st)
			// The door's DNS answers NXDOMAIN: curl cannot even resolve it (exit 6).
			if rc(t, out) != 6 || !strings.Contains(out, "Could not resolve host") {
				t.Errorf("%s: secret.web.test was not refused at lookup:\n%s", st, out)
			}
		}
		if hits := l.Hits.with(tag + "-deny"); len(hits) > 0 {
			t.Errorf("a denied request reached a server: %+v", hits)
		}
		if hits := l.Hits.with(tag + "-plain"); len(hits) != 1 || hits[0].Host != "web.test" {
			t.Errorf("web saw %+v for the allowed HTTP request", hits)
		}
		// Events: each name looked up through the door's DNS, each connection judged.
		for _, c := range []struct {
			kind, host string
			port       uint16
		}{{"dns", "web.test", 0}, {"transparent", "web.test", 80}, {"transparent", "web.test", 443}, {"dns", "api.web.test", 0}, {"transparent", "api.web.test", 443}} {
			ev, ok := w.Events.decision(c.kind, c.host, c.port)
			if !ok || ev.Decision != "allow" || ev.Run != w.Run.ID {
				t.Errorf("no allow decision for %s %s:%d (%+v)\n%s", c.kind, c.host, c.port, ev, w)
			}
			if c.kind == "transparent" && ev.Addr != l.Web.Addr.String() {
				t.Errorf("%s:%d dialled %q, want %s", c.host, c.port, ev.Addr, l.Web.Addr)
			}
		}
		ev, ok := w.Events.decision("dns", "secret.web.test", 0)
		if !ok || ev.Decision != "deny" || ev.Reason != "denied by rule" || ev.Rule == "" {
			t.Errorf("lookup of secret.web.test: %+v\n%s", ev, w)
		}
		if _, ok := w.Events.decision("transparent", "secret.web.test", 0); ok {
			t.Errorf("a connection to secret.web.test reached the door although its lookup was refused\n%s", w)
		}
		if w.Run.Allowed < 5 || w.Run.Denied < 1 {
			t.Errorf("run counts allowed=%d denied=%d, want >=5 and >=1", w.Run.Allowed, w.Run.Denied)
		}
		if !strings.Contains(w.Stderr, "postern: denied dns secret.web.test") {
			t.Errorf("the denial was not reported on stderr:\n%s", w.Stderr)
		}
	})

	t.Run("NonPolicyPortIsRefusedAtOnce", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		w := p.run(t, l.flags(t),
			curlStep("ok", "http://web.test/"+tag+"-ok")+
				curlStep("name", "--connect-timeout", "3", "http://web.test:8080/"+tag+"-8080")+
				curlStep("literal", "--connect-timeout", "3", fmt.Sprintf("http://%s:8080/%s-8080", l.Web.Addr, tag)))
		if httpCode(w.Out(t, "ok")) != 200 {
			t.Fatalf("port 80 of the allowed host failed:\n%s", w)
		}
		for _, st := range []string{"name", "literal"} {
			// 7: connection refused, by the wall's reset; a timeout (28) would mean
			// packets were dropped somewhere instead.
			if out := w.Out(t, st); rc(t, out) != 7 {
				t.Errorf("%s: port 8080 was not refused (want curl exit 7):\n%s", st, out)
			}
		}
		if w.Took > 15*time.Second {
			t.Errorf("the run took %s: refusals must be immediate", w.Took)
		}
		if hits := l.Hits.with(tag + "-8080"); len(hits) > 0 {
			t.Errorf("port 8080 was reached from inside the wall: %+v", hits)
		}
		if ev, ok := w.Events.find(func(ev door.Event) bool { return ev.Port == 8080 && ev.Kind != "wall" }); ok {
			t.Errorf("port 8080 reached the door: %+v", ev)
		}
		// Each refusal is recorded and explained, by name where the run used one.
		for _, host := range []string{"web.test", l.Web.Addr.String()} {
			ev, ok := w.Events.find(func(ev door.Event) bool { return ev.Kind == "wall" && ev.Host == host && ev.Port == 8080 })
			if !ok || ev.Decision != "deny" || !strings.Contains(ev.Reason, "port 8080 is not in the policy's ports") {
				t.Errorf("the wall's refusal of %s:8080 is not in the run's events as a wall denial (%+v, found %v):\n%s", host, ev, ok, w)
			}
			if want := "postern: the wall refused " + host + ":8080: port 8080 is not in the policy's ports"; !strings.Contains(w.Stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, w.Stderr)
			}
		}
	})

	t.Run("ObserveModeReachesEveryPort", func(t *testing.T) {
		// Observe mode lets through what the floor allows and records what
		// enforce would refuse: a port outside the policy's included, which
		// the wall then sends to the door rather than refusing.
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		pol := writeFile(t, "observe.hcl", fmt.Sprintf(`mode = "observe"
ports = [80, 443]
allow = ["web.test"]
allow_cidrs = [%q]
`, l.Web.Prefix))
		w := p.run(t, []string{"--policy", pol, "--resolver", l.Upstream.Addr.String()},
			curlStep("port", "--connect-timeout", "3", "http://web.test:8080/"+tag+"-8080"))
		if httpCode(w.Out(t, "port")) != 200 || len(l.Hits.with(tag+"-8080")) != 1 {
			t.Fatalf("observe mode: port 8080 of an allowed host was not reached:\n%s", w)
		}
		ev, ok := w.Events.find(func(ev door.Event) bool {
			return ev.Event == "decision" && ev.Host == "web.test" && ev.Port == 8080
		})
		if !ok || ev.Kind != "transparent" || ev.Decision != "allow" || !ev.WouldDeny || !strings.Contains(ev.Reason, "port 8080") {
			t.Fatalf("observe mode: the decision on web.test:8080 is %+v (found %v), want allowed, recorded as what enforce would deny for its port", ev, ok)
		}
		if !strings.Contains(w.Stderr, "observed (enforce would deny) transparent web.test:8080") {
			t.Errorf("stderr does not say what enforce would deny:\n%s", w.Stderr)
		}

		// The enforce policy written from the observe run lets the same work
		// through, and nothing else.
		gen := p.exec(t, "policy", "from-run", w.Run.ID)
		if gen.Code != 0 || !strings.Contains(gen.Stdout, `mode = "enforce"`) || !strings.Contains(gen.Stdout, "ports = [8080]") ||
			!strings.Contains(gen.Stdout, `"web.test", # 1 connection, port 8080`) {
			t.Fatalf("policy from-run: exit %d\n%s\n%s", gen.Code, gen.Stdout, gen.Stderr)
		}
		enforced := writeFile(t, "from-run.hcl", gen.Stdout)
		w2 := p.run(t, []string{"--policy", enforced, "--resolver", l.Upstream.Addr.String()},
			curlStep("again", "--connect-timeout", "3", "http://web.test:8080/"+tag+"-again")+
				curlStep("other", "--connect-timeout", "3", "http://inside.test:8080/"+tag+"-other"))
		if httpCode(w2.Out(t, "again")) != 200 || len(l.Hits.with(tag+"-again")) != 1 {
			t.Errorf("under the policy written from the observe run, the same request failed:\n%s", w2)
		}
		if httpCode(w2.Out(t, "other")) == 200 || len(l.Hits.with(tag+"-other")) != 0 {
			t.Errorf("the policy written from the observe run let through a host the run never reached:\n%s", w2)
		}
	})

	t.Run("LiteralAddressOutsideAllowCIDRs", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		other := l.Other.Addr.String()
		w := p.run(t, l.flags(t),
			curlStep("allowed", fmt.Sprintf("http://%s/%s-ok", l.Web.Addr, tag))+
				curlStep("http", fmt.Sprintf("http://%s/%s-out", other, tag))+
				curlStep("tls", "--cacert", "ca.pem", fmt.Sprintf("https://%s/%s-out", other, tag)))
		if out := w.Out(t, "allowed"); httpCode(out) != 200 || !strings.Contains(out, `"served_by":"web"`) {
			t.Fatalf("the literal address inside allow_cidrs was not reached:\n%s", w)
		}
		out := w.Out(t, "http")
		if httpCode(out) != 403 || !strings.Contains(out, "postern door denied") ||
			!strings.Contains(out, "to allow it, add to") || !strings.Contains(out, `allow_cidrs = ["`+other+`/32"]`) {
			t.Errorf("plain HTTP to %s: want a 403 naming the allow_cidrs line that would open it:\n%s", other, out)
		}
		out = w.Out(t, "tls")
		if code := rc(t, out); code == 0 || httpCode(out) != 0 {
			t.Errorf("TLS to %s was not closed:\n%s", other, out)
		}
		if hits := l.Hits.with(tag + "-out"); len(hits) > 0 {
			t.Errorf("%s was reached: %+v", other, hits)
		}
		for _, port := range []uint16{80, 443} {
			ev, ok := w.Events.decision("transparent", other, port)
			if !ok || ev.Decision != "deny" || ev.Reason != "private address not in allow_cidrs" {
				t.Errorf("%s:%d: %+v\n%s", other, port, ev, w)
			}
		}
		if ev, ok := w.Events.decision("transparent", l.Web.Addr.String(), 80); !ok || ev.Decision != "allow" || ev.Reason != "allowed by allow_cidrs" {
			t.Errorf("%s:80: %+v", l.Web.Addr, ev)
		}
	})

	t.Run("NameResolvingToUnlistedPrivateAddress", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		// inside.test is allowed by name but resolves (upstream) into other's
		// /24, which no allow_cidrs lists: a name never opens a private address.
		w := p.run(t, l.flags(t),
			curlStep("ok", "http://web.test/"+tag+"-ok")+
				curlStep("inside", "http://inside.test/"+tag+"-inside")+
				curlStep("inside-tls", "--cacert", "ca.pem", "https://inside.test/"+tag+"-inside"))
		if httpCode(w.Out(t, "ok")) != 200 {
			t.Fatalf("allowed request failed:\n%s", w)
		}
		out := w.Out(t, "inside")
		if httpCode(out) != 403 || !strings.Contains(out, "private address not in allow_cidrs") || !strings.Contains(out, l.Other.Addr.String()) {
			t.Errorf("inside.test over HTTP: want a 403 naming the private address:\n%s", out)
		}
		if out := w.Out(t, "inside-tls"); rc(t, out) == 0 {
			t.Errorf("inside.test over TLS was reached:\n%s", out)
		}
		if hits := l.Hits.with(tag + "-inside"); len(hits) > 0 {
			t.Errorf("inside.test was reached: %+v", hits)
		}
		for _, port := range []uint16{80, 443} {
			ev, ok := w.Events.decision("transparent", "inside.test", port)
			if !ok || ev.Decision != "deny" || ev.Reason != "private address not in allow_cidrs" {
				t.Errorf("inside.test:%d: %+v\n%s", port, ev, w)
			}
		}
	})

	t.Run("TheHostsOwnAddressesAreOnTheFloor", func(t *testing.T) {
		t.Parallel()
		// web's /24, which the policy opens, holds the host's own end of the
		// link: a service the host runs on every address must stay out of reach.
		var seen sync.Map
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.Store(r.URL.Path, true)
			io.WriteString(w, "host service\n")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		port := ln.Addr().(*net.TCPAddr).Port
		if r := curl(t, fmt.Sprintf("http://%s:%d/control", l.Web.Gateway, port)); r.HTTP != 200 {
			t.Fatalf("the host service does not answer on %s from the host side: %+v", l.Web.Gateway, r)
		}
		pol := writeFile(t, "host-port.hcl", fmt.Sprintf("mode = \"enforce\"\nports = [80, 443, %d]\nallow = [\"web.test\"]\nallow_cidrs = [%q]\n", port, l.Web.Prefix))
		p, tag := l.poster(t), randHex(4)
		w := p.run(t, []string{"--policy", pol, "--resolver", l.Upstream.Addr.String()},
			curlStep("ok", "http://web.test/")+
				curlStep("gateway", fmt.Sprintf("http://%s:%d/%s", l.Web.Gateway, port, tag))+
				// The door's own listeners inside the wall are no proxy either.
				step("listeners", `for h in $(awk 'NR>1 && $4=="0A" {split($2,a,":"); print a[2]}' /proc/net/tcp /proc/net/tcp6 | sort -u); do p=$(printf %d 0x$h); echo "port $p"; printf 'GET http://web.test/`+tag+` HTTP/1.1\r\nHost: web.test\r\n\r\n' | socat -t2 - TCP:127.0.0.1:$p; printf 'CONNECT web.test:443 HTTP/1.1\r\nHost: web.test:443\r\n\r\n' | socat -t2 - TCP6:[::1]:$p; done`))
		if httpCode(w.Out(t, "ok")) != 200 {
			t.Fatalf("allowed request failed:\n%s", w)
		}
		if out := w.Out(t, "gateway"); httpCode(out) == 200 || strings.Contains(out, "host service") {
			t.Errorf("the host's own service was reached from inside:\n%s", out)
		}
		if _, ok := seen.Load("/" + tag); ok {
			t.Errorf("the host service saw a request from inside the wall")
		}
		if ev, ok := w.Events.decision("transparent", l.Web.Gateway.String(), uint16(port)); !ok || ev.Decision != "deny" || !strings.Contains(ev.Reason, "hard floor") {
			t.Errorf("%s:%d: %+v\n%s", l.Web.Gateway, port, ev, w)
		}
		out := w.Out(t, "listeners")
		if strings.Count(out, "port ") < 2 || strings.Contains(out, "HTTP/1.1 200") || strings.Contains(out, "served_by") || len(l.Hits.with(tag)) > 0 {
			t.Errorf("the door's listeners answered a proxy request:\n%s", out)
		}
		if _, ok := w.Events.find(func(ev door.Event) bool {
			return ev.Kind == "transparent" && ev.Decision == "deny" && ev.Reason == "hard floor: loopback"
		}); !ok {
			t.Errorf("no loopback floor event for the direct connections to the door\n%s", w)
		}
	})

	t.Run("DNSToAnyResolverIsAnsweredByTheDoor", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		allowed := "dig-" + tag + ".web.test" // allowed (web.test covers subdomains), never connected to
		denied := "denied-" + tag + ".test"
		servers := []string{l.Other.Addr.String(), "192.0.2.53", "127.0.0.53", l.NS.Addr.String()}
		var script strings.Builder
		for i, s := range servers {
			for _, tr := range []string{"udp", "tcp"} {
				flag := "+notcp"
				if tr == "tcp" {
					flag = "+tcp"
				}
				for _, q := range []struct{ what, name string }{{"allowed", allowed}, {"denied", denied}} {
					script.WriteString(step(fmt.Sprintf("%d-%s-%s", i, tr, q.what),
						fmt.Sprintf("dig +time=3 +tries=1 %s @%s %s A", flag, s, q.name)))
				}
			}
		}
		script.WriteString(step("getent", "getent hosts "+denied))
		w := p.run(t, l.flags(t), script.String())
		statusRE := regexp.MustCompile(`status: (\w+)`)
		aRE := regexp.MustCompile(`(?m)IN\s+A\s+(\S+)$`)
		for i, s := range servers {
			for _, tr := range []string{"udp", "tcp"} {
				out := w.Out(t, fmt.Sprintf("%d-%s-allowed", i, tr))
				st, a := statusRE.FindStringSubmatch(out), aRE.FindStringSubmatch(out)
				if st == nil || st[1] != "NOERROR" || a == nil {
					t.Errorf("dig over %s @%s %s: want an answer:\n%s", tr, s, allowed, out)
				} else if addr, err := netip.ParseAddr(a[1]); err != nil || !fakeV4.Contains(addr) {
					t.Errorf("dig over %s @%s %s answered %s, want an address in %s (the door's)", tr, s, allowed, a[1], fakeV4)
				}
				out = w.Out(t, fmt.Sprintf("%d-%s-denied", i, tr))
				if st := statusRE.FindStringSubmatch(out); st == nil || st[1] != "NXDOMAIN" {
					t.Errorf("dig over %s @%s %s: want NXDOMAIN:\n%s", tr, s, denied, out)
				}
			}
		}
		if out := w.Out(t, "getent"); rc(t, out) == 0 {
			t.Errorf("getent resolved a denied name:\n%s", out)
		}
		// The door answered everything itself: neither the named servers nor its own
		// upstream heard of these names (an allowed name is resolved only to connect).
		for _, rs := range []*testhosts.RecordingDNS{l.Outside, l.Upstream} {
			for _, q := range rs.Queries() {
				if strings.Contains(q, tag) {
					t.Errorf("the DNS server at %s was asked %q from inside the wall", rs.Addr, q)
				}
			}
		}
		// Lookups repeated within a second are one event with their count.
		var nAllow, nDeny int
		for _, ev := range w.Events {
			if ev.Kind == "dns" && ev.Host == allowed && ev.Decision == "allow" {
				nAllow += 1 + ev.Repeats
			}
			if ev.Kind == "dns" && ev.Host == denied && ev.Decision == "deny" && ev.Reason == "no allow rule matches" {
				nDeny += 1 + ev.Repeats
			}
		}
		if want := 2 * len(servers); nAllow != want || nDeny < want {
			t.Errorf("dns events: %d allow of %s, %d deny of %s; want %d and at least %d\n%s", nAllow, allowed, nDeny, denied, want, want, w)
		}
	})

	t.Run("DeniedNamesAreNeverLookedUpUpstream", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		nope := "nope-" + tag + ".test"
		w := p.run(t, l.flags(t),
			curlStep("fresh", "http://"+l.Fresh+"/"+tag)+
				curlStep("nope", "http://"+nope+"/")+
				curlStep("secret", "http://secret.web.test/")+
				step("dig", "dig +time=3 +tries=1 @"+l.NS.Addr.String()+" "+"sub."+nope)+
				// An explicit proxy request naming a denied host goes nowhere either:
				// the wall sends it to the door as a connection to the proxy's address.
				curlStep("proxy", "--proxy", "http://"+l.NS.Addr.String()+":80", "http://"+nope+"/"))
		if httpCode(w.Out(t, "fresh")) != 200 {
			t.Fatalf("the allowed fresh name was not reached:\n%s", w)
		}
		if !l.Upstream.Asked(l.Fresh) {
			t.Errorf("the door did not resolve the allowed name %s through --resolver; it saw %q", l.Fresh, l.Upstream.Queries())
		}
		for _, q := range l.Upstream.Queries() {
			if strings.Contains(q, tag) {
				t.Errorf("the door's resolver was asked %q, a name the policy denies", q)
			}
		}
		if ev, ok := w.Events.decision("dns", nope, 0); !ok || ev.Decision != "deny" {
			t.Errorf("lookup of %s: %+v\n%s", nope, ev, w)
		}
	})

	t.Run("UDPAndQUICGoNowhere", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		web := l.Web.Addr.String()
		w := p.run(t, l.flags(t),
			step("dns", "dig +short +notcp +time=3 +tries=1 @"+web+" web.test")+
				step("probe", fmt.Sprintf("./wallprobe udp %s:443 %s:9999 web.test:443 [::ffff:%s]:443", web, web, web))+
				step("bash", fmt.Sprintf("bash -c 'echo %s > /dev/udp/%s/443'", tag, web))+
				step("socat", fmt.Sprintf("echo %s | socat -u - UDP:%s:9999", tag, web)))
		if out := w.Out(t, "dns"); !strings.HasPrefix(strings.TrimSpace(out), "198.1") {
			t.Fatalf("DNS over UDP, the one UDP way that works, failed:\n%s", out)
		}
		out := w.Out(t, "probe")
		if strings.Count(out, " fail ") != 4 || strings.Contains(out, " ok ") {
			t.Errorf("UDP datagrams were sent:\n%s", out)
		}
		for _, st := range []string{"bash", "socat"} {
			if out := w.Out(t, st); rc(t, out) == 0 {
				t.Errorf("%s sent a UDP datagram:\n%s", st, out)
			}
		}
		time.Sleep(300 * time.Millisecond)
		for _, pk := range l.UDP.all() {
			if !strings.Contains(pk, "control-") {
				t.Errorf("a datagram from inside the wall arrived: %s", pk)
			}
		}
	})

	t.Run("ICMPAndRawSocketsFail", func(t *testing.T) {
		t.Parallel()
		p := l.poster(t)
		w := p.run(t, l.flags(t),
			step("icmp", fmt.Sprintf("./wallprobe icmp %s %s", l.Web.Addr, l.Other.Addr))+
				step("packet", "./wallprobe packet")+
				curlStep("ok", "http://web.test/"))
		if httpCode(w.Out(t, "ok")) != 200 {
			t.Fatalf("allowed request failed:\n%s", w)
		}
		out := w.Out(t, "icmp")
		if strings.Count(out, " fail ") != 4 || strings.Contains(out, " ok ") {
			t.Errorf("ICMP echo requests were sent:\n%s", out)
		}
		if out := w.Out(t, "packet"); !strings.Contains(out, "packet fail operation not permitted") {
			t.Errorf("a packet socket was opened:\n%s", out)
		}
		time.Sleep(300 * time.Millisecond)
		for _, pk := range l.ICMP.all() {
			if !strings.Contains(pk, "control-") {
				t.Errorf("an ICMP packet from inside the wall arrived: %s", pk)
			}
		}
	})

	t.Run("IPv6Literals", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		web, other := l.Web.Addr.String(), l.Other.Addr.String()
		w := p.run(t, l.flags(t),
			curlStep("ula", "-g", "http://[fd00::1]/"+tag)+
				curlStep("doc", "-g", "http://[2001:db8::1]/"+tag)+
				curlStep("ula-tls", "-g", "https://[fd00::1]/"+tag)+
				curlStep("mapped-web", "-g", fmt.Sprintf("http://[::ffff:%s]/%s-mapped", web, tag))+
				curlStep("mapped-other", "-g", fmt.Sprintf("http://[::ffff:%s]/%s-other", other, tag))+
				curlStep("nat64-other", "-g", fmt.Sprintf("http://[64:ff9b::%s]/%s-other", other, tag)))
		for _, st := range []string{"ula", "doc"} {
			if out := w.Out(t, st); httpCode(out) != 403 {
				t.Errorf("%s: an IPv6 literal was not refused:\n%s", st, out)
			}
		}
		if out := w.Out(t, "ula-tls"); rc(t, out) == 0 {
			t.Errorf("TLS to [fd00::1] got through:\n%s", out)
		}
		if ev, ok := w.Events.decision("transparent", "fd00::1", 80); !ok || ev.Decision != "deny" || ev.Reason != "private address not in allow_cidrs" {
			t.Errorf("[fd00::1]:80: %+v\n%s", ev, w)
		}
		if ev, ok := w.Events.decision("transparent", "2001:db8::1", 80); !ok || ev.Decision != "deny" {
			t.Errorf("[2001:db8::1]:80: %+v\n%s", ev, w)
		}
		// The mapped spelling of the allowed host is judged as its IPv4 address.
		out := w.Out(t, "mapped-web")
		if httpCode(out) != 200 || len(l.Hits.with(tag+"-mapped")) != 1 {
			t.Errorf("[::ffff:%s] (the allowed host) was not reached:\n%s", web, out)
		}
		if ev, ok := w.Events.decision("transparent", web, 80); !ok || ev.Decision != "allow" || ev.Reason != "allowed by allow_cidrs" {
			t.Errorf("[::ffff:%s]:80 was not judged as %s: %+v\n%s", web, web, ev, w)
		}
		for _, st := range []string{"mapped-other", "nat64-other"} {
			if out := w.Out(t, st); httpCode(out) != 403 || !strings.Contains(out, "private address not in allow_cidrs") {
				t.Errorf("%s: IPv4 %s hidden in IPv6 was not refused as private:\n%s", st, other, out)
			}
		}
		if hits := l.Hits.with(tag + "-other"); len(hits) > 0 {
			t.Errorf("other was reached: %+v", hits)
		}
	})

	t.Run("HostHeaderAndSNIMustNameTheAdmittedHost", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		web := l.Web.Addr.String()
		w := p.run(t, l.flags(t),
			curlStep("sni-ok", "--cacert", "ca.pem", "--connect-to", "web.test:443:web.test:443", "https://web.test/"+tag+"-ok")+
				curlStep("host-ok", "-H", "Host: web.test", "http://web.test/"+tag+"-ok")+
				curlStep("sni-denied", "--cacert", "ca.pem", "--connect-to", "secret.web.test:443:web.test:443", "https://secret.web.test/"+tag+"-bad")+
				curlStep("sni-other", "--cacert", "ca.pem", "--connect-to", "other.test:443:web.test:443", "https://other.test/"+tag+"-bad")+
				curlStep("host-denied", "-H", "Host: secret.web.test", "http://web.test/"+tag+"-bad")+
				curlStep("host-other", "-H", "Host: other.test", "http://web.test/"+tag+"-bad")+
				curlStep("resolve-literal", "--cacert", "ca.pem", "--resolve", "secret.web.test:443:"+web, "https://secret.web.test/"+tag+"-bad")+
				curlStep("host-literal", "-H", "Host: secret.web.test", "http://"+web+"/"+tag+"-bad")+
				// A second request on an admitted connection is held to the same host.
				step("pipeline", fmt.Sprintf(`printf 'GET /%s-first HTTP/1.1\r\nHost: web.test\r\n\r\nGET /%s-bad HTTP/1.1\r\nHost: secret.web.test\r\n\r\n' | socat -t3 - TCP:web.test:80`, tag, tag))+
				// Port 443 carries TLS or nothing.
				step("opaque-443", "echo "+tag+"-bad | socat -t2 - TCP:web.test:443"))
		for _, st := range []string{"sni-ok", "host-ok"} {
			if out := w.Out(t, st); httpCode(out) != 200 {
				t.Errorf("%s: a matching name was refused:\n%s", st, out)
			}
		}
		for _, st := range []string{"sni-denied", "sni-other", "resolve-literal"} {
			if out := w.Out(t, st); rc(t, out) == 0 || httpCode(out) != 0 {
				t.Errorf("%s: TLS naming another host got through:\n%s", st, out)
			}
		}
		for _, st := range []string{"host-denied", "host-other", "host-literal"} {
			if out := w.Out(t, st); httpCode(out) != 403 || !strings.Contains(out, "postern door denied") {
				t.Errorf("%s: a Host header naming another host got through:\n%s", st, out)
			}
		}
		out := w.Out(t, "pipeline")
		if !strings.Contains(out, "HTTP/1.1 200 OK") || !strings.Contains(out, "HTTP/1.1 403 Forbidden") ||
			!strings.Contains(out, "http host secret.web.test does not match admitted host web.test") || len(l.Hits.with(tag+"-first")) != 1 {
			t.Errorf("pipelined requests: want the first answered and the second refused:\n%s", out)
		}
		if out := w.Out(t, "opaque-443"); strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), "rc=0")) != "" {
			t.Errorf("opaque bytes on 443 got an answer:\n%s", out)
		}
		if ev, ok := w.Events.find(func(ev door.Event) bool {
			return ev.Event == "decision" && ev.Host == "web.test" && ev.Port == 443 && ev.Reason == "opaque (non-tls) traffic on port 443"
		}); !ok || ev.Decision != "deny" {
			t.Errorf("no deny event for opaque traffic on 443\n%s", w)
		}
		if hits := l.Hits.with(tag + "-bad"); len(hits) > 0 {
			t.Errorf("mismatched requests reached a server: %+v", hits)
		}
		mismatch := 0
		for _, ev := range w.Events {
			if ev.Event == "decision" && ev.Kind == "transparent" && ev.Decision == "deny" &&
				(strings.Contains(ev.Reason, "does not match admitted host") || strings.Contains(ev.Reason, "names a host the policy denies")) {
				mismatch++
			}
		}
		if mismatch < 7 {
			t.Errorf("%d deny events for mismatched names, want 7\n%s", mismatch, w)
		}
	})

	t.Run("KernelToolsCannotOpenTheWall", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		web := l.Web.Addr.String()
		w := p.run(t, l.flags(t),
			step("nft-flush", "nft flush ruleset")+
				step("nft-list", "nft list ruleset")+
				step("nft-userns", "unshare -Ur nft flush ruleset")+
				step("veth", "ip link add x type veth peer name y")+
				step("lo-netns", "ip link set lo netns 1")+
				step("nsenter", "nsenter --net=/proc/1/ns/net true")+
				step("unshare-n", "unshare -n true")+
				step("unshare-urn", fmt.Sprintf("unshare -Urn sh -c 'ip link set lo up; curl -sS --max-time 3 http://%s/%s-unshare'", web, tag))+
				step("unshare-un", fmt.Sprintf("unshare -Un curl -sS --max-time 3 http://%s/%s-unshare", web, tag))+
				// After all that, the rules are as they were: allowed works, the rest is judged.
				curlStep("after-ok", "http://web.test/"+tag+"-after")+
				curlStep("after-denied", fmt.Sprintf("http://%s/%s-unshare", l.Other.Addr, tag)))
		for _, st := range []string{"nft-flush", "nft-list", "nft-userns", "veth", "lo-netns", "nsenter", "unshare-n", "unshare-urn", "unshare-un"} {
			out := w.Out(t, st)
			if rc(t, out) == 0 {
				t.Errorf("%s succeeded inside the wall:\n%s", st, out)
			}
			if strings.Contains(out, "served_by") || strings.Contains(out, "table inet postern") {
				t.Errorf("%s: %s", st, out)
			}
		}
		if out := w.Out(t, "nft-flush"); !strings.Contains(out, "Operation not permitted") {
			t.Errorf("nft flush ruleset: want 'Operation not permitted':\n%s", out)
		}
		if httpCode(w.Out(t, "after-ok")) != 200 {
			t.Errorf("the allowed request after the attempts failed:\n%s", w)
		}
		if out := w.Out(t, "after-denied"); httpCode(out) != 403 {
			t.Errorf("after the attempts, a private address is no longer judged:\n%s", out)
		}
		if hits := l.Hits.with(tag + "-unshare"); len(hits) > 0 {
			t.Errorf("a namespace trick reached a server: %+v", hits)
		}
	})

	t.Run("HostFilesAndKernelSettingsAreReadOnly", func(t *testing.T) {
		t.Parallel()
		// As root the run's uid is the host's root. Had it write access to the
		// host, it could leave the wall through the host: a core_pattern of
		// "|/path/prog" is run by the kernel as root outside every namespace on
		// the next crash; a file in /etc/cron.d runs outside on the next minute.
		// Each attempt below writes back what is already there, or into a
		// directory of the test's own.
		p := l.poster(t)
		hostDir, err := os.MkdirTemp("/var/tmp", "postern-wall-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(hostDir) })
		w := p.run(t, l.flags(t),
			step("core-pattern", "cat /proc/sys/kernel/core_pattern > core.txt && cat core.txt > /proc/sys/kernel/core_pattern")+
				step("sysctl", "cat /proc/sys/vm/swappiness > sw.txt && cat sw.txt > /proc/sys/vm/swappiness")+
				step("host-dir", "touch "+hostDir+"/planted")+
				step("etc", "test -w /etc/passwd")+
				step("sys", "for f in /sys/kernel/mm/transparent_hugepage/enabled /sys/power/state /sys/kernel/profiling; do if [ -e $f ] && [ -w $f ]; then echo WRITABLE $f; fi; done")+
				// Device nodes: a writable /dev/vda is the host's disk, /dev/console and
				// /dev/tty1 its consoles.
				// (find's -type trusts readdir, which does not see through bind mounts.)
				step("devices", `find /dev -path /dev/pts -prune -o -print | while read f; do if { [ -b "$f" ] || [ -c "$f" ]; } && [ -w "$f" ]; then echo "$f"; fi; done`)+
				step("urandom", "head -c 8 /dev/urandom | wc -c")+
				step("workdir", "touch in-workdir")+
				step("tmp", "touch /tmp/in-tmp && echo hi > /dev/null")+
				curlStep("ok", "http://web.test/"))
		for _, st := range []string{"core-pattern", "sysctl", "host-dir", "etc"} {
			if out := w.Out(t, st); rc(t, out) == 0 {
				t.Errorf("%s: the run wrote to the host:\n%s", st, out)
			}
		}
		if out := w.Out(t, "sys"); strings.Contains(out, "WRITABLE") {
			t.Errorf("sysfs is writable from inside:\n%s", out)
		}
		allowedDevs := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}
		out := w.Out(t, "devices")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(line, "/dev/") && !slices.Contains(allowedDevs, line) {
				t.Errorf("device %s is writable from inside the wall", line)
			}
		}
		if rc(t, out) != 0 || !strings.Contains(out, "/dev/null") {
			t.Errorf("listing the run's devices failed, or /dev/null is not writable:\n%s", out)
		}
		if out := w.Out(t, "urandom"); strings.TrimSpace(strings.Split(out, "\n")[1]) != "8" {
			t.Errorf("/dev/urandom: %q", out)
		}
		if _, err := os.Stat(filepath.Join(hostDir, "planted")); err == nil {
			t.Errorf("the run planted a file in %s on the host", hostDir)
		}
		for _, st := range []string{"workdir", "tmp"} {
			if out := w.Out(t, st); rc(t, out) != 0 {
				t.Errorf("%s: the run cannot write where it may:\n%s", st, out)
			}
		}
		if _, err := os.Stat(filepath.Join(p.Dir, "in-workdir")); err != nil {
			t.Errorf("a file written in the working directory is not there on the host: %v", err)
		}
		if httpCode(w.Out(t, "ok")) != 200 {
			t.Errorf("allowed request failed:\n%s", w)
		}
	})

	t.Run("TheDoorIsInvisibleAndKillMinusOneStaysInside", func(t *testing.T) {
		t.Parallel()
		p := l.poster(t)
		// A host process of the same user the run must not be able to signal.
		bystander := exec.Command("sleep", "120")
		if err := bystander.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bystander.Process.Kill(); bystander.Wait() })
		pidFile := filepath.Join(p.Dir, "postern.pid")
		script := "while [ ! -s postern.pid ]; do sleep 0.05; done; P=$(cat postern.pid); B=" + strconv.Itoa(bystander.Process.Pid) + "\n" +
			step("kill0", "kill -0 $P") +
			step("proc", "test -e /proc/$P") +
			step("kill0-bystander", "kill -0 $B") +
			step("ptrace", "./wallprobe ptrace $P 1") +
			step("kill-all", "sleep 60 & S=$!; kill -9 -1; sleep 0.3; if kill -0 $S 2>/dev/null; then echo ALIVE; else echo GONE; fi") +
			"exit 5\n"
		run := p.start(t, append(append([]string{"run"}, l.flags(t)...), "--", "sh", "-c", script)...)
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(run.cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		res := run.wait(t)
		out := sections(res.Stdout)
		for _, st := range []string{"kill0", "proc", "kill0-bystander"} {
			if o, ok := out[st]; !ok || rc(t, o) == 0 {
				t.Errorf("%s: a host process is visible from inside:\n%s\n%s", st, o, res.Stderr)
			}
		}
		if o := out["ptrace"]; strings.Count(o, " fail ") != 2 || strings.Contains(o, " ok ") {
			t.Errorf("ptrace from inside:\n%s", o)
		}
		if o := out["kill-all"]; !strings.Contains(o, "GONE") {
			t.Errorf("kill -9 -1 did not kill the run's own processes:\n%s", o)
		}
		if res.Code != 5 {
			t.Errorf("postern exited %d, want the run's 5\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if err := bystander.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("kill -9 -1 inside the wall killed a host process: %v", err)
		}
		r := p.lastRun(t)
		if r.State != records.StateExited || r.ExitCode == nil || *r.ExitCode != 5 {
			t.Errorf("run record after kill -9 -1: %+v", r)
		}
	})

	t.Run("NothingOutlivesTheRun", func(t *testing.T) {
		t.Parallel()
		p := l.poster(t)
		marks := []string{"299." + fmt.Sprint(time.Now().UnixNano()%1e6), "298." + fmt.Sprint(time.Now().UnixNano()%1e6), "297." + fmt.Sprint(time.Now().UnixNano()%1e6)}
		script := fmt.Sprintf("setsid sleep %s & echo pid=$!\n(sleep %s &)\nnohup sleep %s >/dev/null 2>&1 &\n", marks[0], marks[1], marks[2]) +
			"sleep 0.2; touch spawned; while [ ! -e go ]; do sleep 0.05; done; exit 0\n"
		run := p.start(t, append(append([]string{"run"}, l.flags(t)...), "--", "sh", "-c", script)...)
		if !eventually(10*time.Second, func() bool { _, err := os.Stat(filepath.Join(p.Dir, "spawned")); return err == nil }) {
			run.wait(t)
			t.Fatalf("the run never spawned its sleepers")
		}
		for _, m := range marks {
			if pids := sleepers(m); len(pids) != 1 {
				t.Errorf("sleep %s is not running on the host while the run is: %v", m, pids)
			}
		}
		if err := os.WriteFile(filepath.Join(p.Dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if res := run.wait(t); res.Code != 0 {
			t.Fatalf("run exited %d\n%s", res.Code, res.Stderr)
		}
		// Wait returned: nothing of the run may be left, not even for a moment.
		for _, m := range marks {
			if pids := sleepers(m); len(pids) > 0 {
				t.Errorf("sleep %s outlived the run: pids %v", m, pids)
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})

	t.Run("HostUnixSocketsAreUnreachable", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		var accepted sync.Map
		var paths []string
		listen := func(addr string) {
			ln, err := net.Listen("unix", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Store(addr, true)
					c.Close()
				}
			}()
			// The host side can use it: a failure inside is the wall's doing.
			c, err := net.Dial("unix", addr)
			if err != nil {
				t.Fatalf("host-side dial %s: %v", addr, err)
			}
			c.Close()
			if !eventually(2*time.Second, func() bool { _, ok := accepted.Load(addr); return ok }) {
				t.Fatalf("listener %s accepted nothing from the host side", addr)
			}
			accepted.Delete(addr)
		}
		for _, dir := range []string{"/tmp", "/run"} {
			path := filepath.Join(dir, "postern-test-"+tag+".sock")
			listen(path)
			t.Cleanup(func() { os.Remove(path) })
			paths = append(paths, path)
		}
		abstract := "@postern-test-" + tag
		listen(abstract)
		var script strings.Builder
		for i, path := range paths {
			script.WriteString(step(fmt.Sprintf("exists-%d", i), "test -e "+path))
			script.WriteString(step(fmt.Sprintf("connect-%d", i), "socat -u OPEN:/dev/null UNIX-CONNECT:"+path))
		}
		script.WriteString(step("abstract", "socat -u OPEN:/dev/null ABSTRACT-CONNECT:"+abstract[1:]))
		w := p.run(t, l.flags(t), script.String())
		for st, o := range w.out {
			if rc(t, o) == 0 {
				t.Errorf("%s: a host unix socket is reachable from inside:\n%s", st, o)
			}
		}
		if len(w.out) != 5 {
			t.Errorf("want 5 steps:\n%s", w)
		}
		time.Sleep(200 * time.Millisecond)
		accepted.Range(func(k, _ any) bool {
			t.Errorf("the host socket %v accepted a connection from inside the wall", k)
			return true
		})
	})

	t.Run("ProxyVariablesAreNotNeeded", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		// A proxy inherited from the person's shell is dropped: the wall needs none.
		p.Env = []string{"http_proxy=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "ALL_PROXY=socks5://127.0.0.1:9"}
		w := p.run(t, l.flags(t),
			step("env", "env | grep -i _proxy=")+
				curlStep("plain", "http://web.test/"+tag+"-plain")+
				step("env-i", "env -i PATH=/usr/bin:/bin curl -sS --max-time 8 http://web.test/"+tag+"-envi")+
				step("env-i-tls", "env -i PATH=/usr/bin:/bin curl -sS --max-time 8 --cacert ca.pem https://web.test/"+tag+"-envi"))
		if out := w.Out(t, "env"); rc(t, out) != 1 {
			t.Errorf("proxy variables reached the run:\n%s", out)
		}
		if httpCode(w.Out(t, "plain")) != 200 {
			t.Errorf("curl with the person's proxy variables dropped failed:\n%s", w)
		}
		for _, st := range []string{"env-i", "env-i-tls"} {
			if out := w.Out(t, st); rc(t, out) != 0 || !strings.Contains(out, `"served_by":"web"`) {
				t.Errorf("%s: curl with an empty environment failed:\n%s", st, out)
			}
		}
		if n := len(l.Hits.with(tag + "-envi")); n != 2 {
			t.Errorf("web saw %d requests from the empty environment, want 2", n)
		}
	})

	t.Run("FollowPrintsEventsAsTheyHappen", func(t *testing.T) {
		t.Parallel()
		p, tag := l.poster(t), randHex(4)
		script := curlStep("first", "http://web.test/"+tag+"-first") +
			"while [ ! -e go ]; do sleep 0.05; done\n" +
			curlStep("second", "http://secret.web.test/"+tag+"-second")
		run := p.start(t, append(append([]string{"run"}, l.flags(t)...), "--", "sh", "-c", script)...)
		var id string
		if !eventually(10*time.Second, func() bool {
			for _, r := range p.runs(t) {
				if r.State == records.StateRunning {
					id = r.ID
					return true
				}
			}
			return false
		}) {
			run.wait(t)
			t.Fatalf("no running run appeared in 'runs list'")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		follow := p.command(ctx, "runs", "events", id, "--follow", "--json")
		stdout, err := follow.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var ferr bytes.Buffer
		follow.Stderr = &ferr
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan door.Event, 64)
		go func() {
			defer close(lines)
			dec := json.NewDecoder(stdout)
			for {
				var ev door.Event
				if err := dec.Decode(&ev); err != nil {
					return
				}
				lines <- ev
			}
		}()
		// The first request's events arrive while the run waits for the go file.
		waitFor := func(what string, match func(door.Event) bool) {
			t.Helper()
			timeout := time.After(10 * time.Second)
			for {
				select {
				case ev, ok := <-lines:
					if !ok {
						t.Fatalf("--follow ended before %s; stderr %s", what, ferr.String())
					}
					if match(ev) {
						return
					}
				case <-timeout:
					t.Fatalf("--follow printed no %s within 10s", what)
				}
			}
		}
		waitFor("allow of web.test:80", func(ev door.Event) bool {
			return ev.Kind == "transparent" && ev.Host == "web.test" && ev.Port == 80 && ev.Decision == "allow"
		})
		if r := p.lastRun(t); r.State != records.StateRunning {
			t.Fatalf("the run ended (%s) before its first event was followed", r.State)
		}
		if err := os.WriteFile(filepath.Join(p.Dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor("deny of secret.web.test", func(ev door.Event) bool {
			return ev.Kind == "dns" && ev.Host == "secret.web.test" && ev.Decision == "deny"
		})
		res := run.wait(t)
		ended := time.Now()
		if res.Code != 0 || !strings.Contains(res.Stdout, "Could not resolve host") {
			t.Errorf("the run: exit %d\n%s", res.Code, res.Stdout)
		}
		for range lines {
		}
		if err := follow.Wait(); err != nil {
			t.Errorf("runs events --follow: %v\n%s", err, ferr.String())
		}
		if d := time.Since(ended); d > 3*time.Second {
			t.Errorf("--follow kept going %s after the run ended", d)
		}
	})

	t.Run("UnprivilegedUser", func(t *testing.T) {
		t.Parallel()
		testUnprivileged(t, l)
	})
}

// started is a postern process running in the background.
type started struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	out    bytes.Buffer
	errb   bytes.Buffer
	start  time.Time
	done   chan struct{}
	res    result
}

// start starts postern and returns at once; the test's end kills it if it is
// still running.
func (p poster) start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	s := &started{cancel: cancel, done: make(chan struct{})}
	s.cmd = p.command(ctx, args...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errb
	s.start = time.Now()
	if err := s.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		err := s.cmd.Wait()
		s.res = result{Stdout: s.out.String(), Stderr: s.errb.String(), Took: time.Since(s.start)}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			s.res.Code = ee.ExitCode()
		} else if err != nil {
			s.res.Code = -1
			s.res.Stderr += "\n" + err.Error()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// wait waits for the process (at most until its 60s deadline).
func (s *started) wait(t *testing.T) result {
	t.Helper()
	<-s.done
	if s.res.Code == -1 {
		t.Fatalf("postern %q did not finish: %s", s.cmd.Args, s.res.Stderr)
	}
	return s.res
}

// testUnprivileged repeats the core checks with the binary run as nobody: a
// wall raised in a user namespace the unprivileged user made.
func testUnprivileged(t *testing.T, l *wallLab) {
	p, home, work := nobodyPoster(t)
	copyAs := func(src, dst string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dst, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	copyAs(l.CA, filepath.Join(work, "ca.pem"))
	policy := filepath.Join(work, "policy.hcl")
	copyAs(l.policy(t), policy)

	pr := p.exec(t, "machine", "probe-confinement", "--json")
	var v struct {
		Carry string `json:"carry"`
		User  string `json:"user"`
	}
	if err := json.Unmarshal([]byte(pr.Stdout), &v); err != nil || pr.Code != 0 || v.Carry != "network-wall" {
		t.Fatalf("probe-confinement as uid %d: exit %d, carry %q (%v)\n%s\n%s", nobody, pr.Code, v.Carry, err, pr.Stdout, pr.Stderr)
	}
	// The measure kept the small pid 1: the run below enters a user
	// namespace of postern's own first and has its wall set up by postern
	// itself (carry/netwall/ownns).
	tag := randHex(4)
	denied := "nobody-denied-" + tag + ".test"
	w := p.run(t, []string{"--policy", policy, "--resolver", l.Upstream.Addr.String()},
		step("id", "id -u")+
			step("pid1", "cat /proc/1/comm")+
			curlStep("http", "http://web.test/"+tag+"-nobody")+
			curlStep("https", "--cacert", "ca.pem", "https://web.test/"+tag+"-nobody")+
			curlStep("denied", "http://secret.web.test/"+tag+"-bad")+
			curlStep("private", fmt.Sprintf("http://%s/%s-bad", l.Other.Addr, tag))+
			curlStep("port", "http://web.test:8080/"+tag+"-bad")+
			step("dig-allowed", "dig +short +time=3 +tries=1 @"+l.Other.Addr.String()+" web.test")+
			step("dig-denied", "dig +time=3 +tries=1 +tcp @"+l.Other.Addr.String()+" "+denied)+
			step("nft", "nft flush ruleset")+
			// The filesystem, as an unprivileged user: the home's writes stay
			// private, the records out of reach, no setuid file left.
			step("aliases", `echo 'curl evil.test' > "$HOME/.bash_aliases" && cat "$HOME/.bash_aliases"`)+
			step("records", `(: > "$POSTERN_HOME/records.db")`)+
			step("setuid", "cp /bin/sh ./s && chmod 4755 ./s")+
			"exit 3\n")
	if w.Code != 3 || w.Run.ExitCode == nil || *w.Run.ExitCode != 3 || w.Run.Carry != "network-wall" {
		t.Fatalf("as uid %d: %s", nobody, w)
	}
	if out := w.Out(t, "id"); strings.TrimSpace(strings.Split(out, "\n")[1]) != strconv.Itoa(nobody) {
		t.Errorf("the run's uid: %q", out)
	}
	if out := w.Out(t, "pid1"); smallPid1 && netwall.SetsUpItself() && !strings.Contains(out, "wall-pid1-") {
		t.Errorf("nobody's run was not set up by postern itself: its pid 1 is %q", out)
	}
	for _, st := range []string{"http", "https"} {
		if out := w.Out(t, st); httpCode(out) != 200 || !strings.Contains(out, `"served_by":"web"`) {
			t.Errorf("%s as nobody: %s", st, out)
		}
	}
	if n := len(l.Hits.with(tag + "-nobody")); n != 2 {
		t.Errorf("web saw %d requests from nobody's run, want 2", n)
	}
	if out := w.Out(t, "denied"); rc(t, out) != 6 {
		t.Errorf("secret.web.test as nobody: %s", out)
	}
	if out := w.Out(t, "private"); httpCode(out) != 403 {
		t.Errorf("private address as nobody: %s", out)
	}
	if out := w.Out(t, "port"); rc(t, out) != 7 {
		t.Errorf("port 8080 as nobody: %s", out)
	}
	if hits := l.Hits.with(tag + "-bad"); len(hits) > 0 {
		t.Errorf("nobody's run reached %+v", hits)
	}
	if out := w.Out(t, "dig-allowed"); !strings.HasPrefix(strings.TrimSpace(out), "198.1") {
		t.Errorf("dig as nobody: %s", out)
	}
	if out := w.Out(t, "dig-denied"); !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("dig of a denied name as nobody: %s", out)
	}
	if out := w.Out(t, "nft"); rc(t, out) == 0 {
		t.Errorf("nft flush ruleset as nobody succeeded: %s", out)
	}
	if out := w.Out(t, "aliases"); rc(t, out) != 0 || !strings.Contains(out, "curl evil.test") {
		t.Errorf("the home as nobody does not take writes inside: %s", out)
	}
	if _, err := os.Stat(filepath.Join(home, ".bash_aliases")); err == nil {
		t.Errorf("~/.bash_aliases written by nobody's run reached the host")
	}
	if out := w.Out(t, "records"); rc(t, out) == 0 {
		t.Errorf("nobody's run truncated its records: %s", out)
	}
	if out := w.Out(t, "setuid"); rc(t, out) == 0 {
		t.Errorf("nobody's run made a setuid file: %s", out)
	}
	if st, err := os.Stat(filepath.Join(work, "s")); err == nil && st.Mode()&os.ModeSetuid != 0 {
		t.Errorf("%s is setuid on the host", filepath.Join(work, "s"))
	}
	if rs := p.runs(t); len(rs) != 1 || rs[0].ID != w.Run.ID {
		t.Errorf("nobody's records after the run: %+v", rs)
	}
	for _, q := range append(l.Outside.Queries(), l.Upstream.Queries()...) {
		if strings.Contains(q, tag) {
			t.Errorf("a DNS server was asked %q from nobody's run", q)
		}
	}
	if ev, ok := w.Events.decision("transparent", "web.test", 443); !ok || ev.Decision != "allow" {
		t.Errorf("no allow event for web.test:443 in nobody's run\n%s", w)
	}
	if ev, ok := w.Events.decision("dns", denied, 0); !ok || ev.Decision != "deny" {
		t.Errorf("no deny event for %s in nobody's run\n%s", denied, w)
	}
}

func TestWallExitStatusPropagates(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	for _, c := range []struct {
		script string
		want   int
		why    string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"kill -9 $$", 128 + 9, "ended by signal killed"},
	} {
		w := p.run(t, nil, c.script)
		if w.Code != c.want || w.Run.State != records.StateExited || w.Run.ExitCode == nil || *w.Run.ExitCode != c.want || w.Run.Why != c.why {
			t.Errorf("%q: want exit %d (why %q):\n%s", c.script, c.want, c.why, w)
		}
	}
	if n := len(p.runs(t)); n != 3 {
		t.Errorf("%d runs recorded, want 3", n)
	}
}

func TestWallRefusesNeverMeasuredMachine(t *testing.T) {
	testhosts.EndToEnd(t)
	t.Parallel()
	p := poster{Home: t.TempDir(), Dir: t.TempDir()}
	marker := filepath.Join(p.Dir, "spawned")
	r := p.exec(t, "run", "--", "sh", "-c", "touch "+marker)
	if r.Code != exitRefused {
		t.Fatalf("exit %d, want %d\n%s", r.Code, exitRefused, r.Stderr)
	}
	line := strings.TrimSpace(r.Stderr)
	for _, want := range []string{"EGRESS-CLOSED-DEFAULT-REFUSED", "lane local-linux", `machine "local"`, "never measured",
		"nothing was started", "fix: run 'postern machine probe-confinement local'"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal line lacks %q: %s", want, line)
		}
	}
	if !strings.HasPrefix(line, "EGRESS-CLOSED-DEFAULT-REFUSED") {
		t.Errorf("the refusal does not start with its marker: %s", line)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused command ran: %s exists (%v)", marker, err)
	}
	rs := p.runs(t)
	if len(rs) != 1 || rs[0].State != records.StateRefused || rs[0].Carry != "none" || rs[0].ExitCode != nil ||
		!strings.Contains(rs[0].Why, "EGRESS-CLOSED-DEFAULT-REFUSED") || !slices.Equal(rs[0].Command, []string{"sh", "-c", "touch " + marker}) {
		t.Errorf("refused run record: %+v", rs)
	}
}

func TestWallEgressOpenNeedsAReason(t *testing.T) {
	testhosts.EndToEnd(t)
	t.Parallel()
	p := poster{Home: t.TempDir(), Dir: t.TempDir()}
	marker := filepath.Join(p.Dir, "spawned")
	for _, args := range [][]string{
		{"run", "--egress-open=", "--", "touch", marker},
		{"run", "--egress-open", "", "--", "touch", marker},
		{"run", "--egress-open", "   ", "--", "touch", marker},
		// "--" is where the command starts, not a reason.
		{"run", "--egress-open", "--", "touch", marker},
	} {
		r := p.exec(t, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "--egress-open needs a reason") {
			t.Errorf("%q: exit %d, want 2 and a message asking for a reason\n%s", args, r.Code, r.Stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%q ran the command", args)
		}
	}
	if rs := p.runs(t); len(rs) != 0 {
		t.Errorf("runs were recorded for rejected flags: %+v", rs)
	}

	const reason = "fetching the toolchain from its vendor"
	r := p.exec(t, "run", "--egress-open", reason, "--", "sh", "-c", "touch "+marker+"; exit 4")
	if r.Code != 4 {
		t.Fatalf("open run: exit %d\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the open run did not run its command: %v", err)
	}
	if !strings.Contains(r.Stderr, "WARNING") || !strings.Contains(r.Stderr, "OPEN network") || !strings.Contains(r.Stderr, reason) {
		t.Errorf("no warning naming the reason:\n%s", r.Stderr)
	}
	run := p.lastRun(t)
	if run.Carry != "none" || run.EgressOpenReason != reason || run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 4 {
		t.Errorf("open run record: %+v", run)
	}
}

func TestWallInteractiveRunGetsATerminal(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}

	t.Run("TTYAndSize", func(t *testing.T) {
		out, code := p.inTerminal(t, 33, 101, "tty; stty size", nil)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if !regexp.MustCompile(`/dev/pts/\d+`).MatchString(out) || !strings.Contains(out, "33 101") {
			t.Errorf("the run did not see a 33x101 terminal:\n%q", out)
		}
	})
	t.Run("CtrlCInterrupts", func(t *testing.T) {
		start := time.Now()
		// exec: a Ctrl-C between READY and sleep's start would otherwise reach a
		// shell that holds it until its child ends, and sleep would never see it.
		out, code := p.inTerminal(t, 24, 80, "echo READY; exec sleep 100", func(m *os.File) {
			m.Write([]byte{0x03})
		})
		if code != 128+int(syscall.SIGINT) {
			t.Errorf("Ctrl-C: exit %d, want %d:\n%q", code, 128+int(syscall.SIGINT), out)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("Ctrl-C took %s to end the run", d)
		}
		r := p.lastRun(t)
		if r.ExitCode == nil || *r.ExitCode != 130 || r.Why != "ended by signal interrupt" {
			t.Errorf("run record after Ctrl-C: %+v", r)
		}
	})
}

// TestWallSignalsReachTheRun sends postern SIGUSR1, then SIGTERM, the moment
// its run prints that it has started: postern and the init ask for their
// signals while the wall goes up, and hold them before the command starts,
// so the run's traps get both and its status is postern's. Five runs, each
// signalled at once.
func TestWallSignalsReachTheRun(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	script := `trap 'echo got-usr1' USR1; trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done`
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := p.command(ctx, "run", "--", "sh", "-c", script)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		lines := bufio.NewReader(stdout)
		expect := func(want string) {
			t.Helper()
			line, err := lines.ReadString('\n')
			if strings.TrimSpace(line) != want {
				t.Errorf("run %d: read %q (%v), want %q", i, line, err, want)
			}
		}
		expect("ready")
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		expect("got-usr1")
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		expect("got-term")
		_, _ = io.Copy(io.Discard, stdout)
		err = cmd.Wait()
		cancel()
		if code := cmd.ProcessState.ExitCode(); code != 5 {
			t.Fatalf("run %d: postern exited %d (%v), want the trap's 5; stderr:\n%s", i, code, err, errb.String())
		}
		if r := p.lastRun(t); r.ExitCode == nil || *r.ExitCode != 5 {
			t.Errorf("run %d: record %+v, want exit 5", i, r)
		}
	}
}

// inTerminal runs 'postern run -- sh -c script' on a new pseudo-terminal of
// rows x cols. When the run prints READY, onReady gets the terminal's master
// side (to type keys). It returns everything printed and postern's status.
func (p poster) inTerminal(t *testing.T, rows, cols uint16, script string, onReady func(master *os.File)) (string, int) {
	t.Helper()
	master, slave := openPTY(t, rows, cols)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := p.command(ctx, "run", "--", "sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		slave.Close()
		t.Fatal(err)
	}
	slave.Close()

	var (
		mu  sync.Mutex
		buf bytes.Buffer
	)
	readDone := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(readDone)
		b := make([]byte, 4096)
		signalled := false
		for {
			k, err := master.Read(b)
			mu.Lock()
			buf.Write(b[:k])
			if !signalled && strings.Contains(buf.String(), "READY") {
				signalled = true
				close(ready)
			}
			mu.Unlock()
			if err != nil {
				return // EIO once every slave descriptor is closed
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	if onReady != nil {
		select {
		case <-ready:
			onReady(master)
		case err := <-waited:
			waited <- err
		case <-time.After(20 * time.Second):
			t.Errorf("the run never printed READY")
		}
	}
	err := <-waited
	select {
	case <-readDone:
	case <-time.After(5 * time.Second):
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("postern run in a terminal: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return buf.String(), code
}

// TestWallRunsLeaveNothingBehind runs the wall many times in a row and checks
// that no namespace, descriptor, process or nftables table outlives them. It
// is not parallel: nothing else of this package runs meanwhile.
func TestWallRunsLeaveNothingBehind(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	n := 200
	if testing.Short() {
		n = 20
	}
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	// One run first, so lazily opened descriptors of this process are counted before.
	if r := p.exec(t, "run", "--", "true"); r.Code != 0 {
		t.Fatalf("postern run -- true: exit %d\n%s", r.Code, r.Stderr)
	}
	nsBefore, fdsBefore, tablesBefore := netnsInodes(), openFDs(), nftTables(t)
	start := time.Now()
	for i := 0; i < n; i++ {
		if r := p.exec(t, "run", "--", "true"); r.Code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, r.Code, r.Stderr)
		}
	}
	took := time.Since(start)
	t.Logf("%d walled runs in %s (%s each)", n, took.Round(time.Millisecond), (took / time.Duration(n)).Round(time.Millisecond))

	if pids := procsRunning(binFor(t)); len(pids) > 0 {
		t.Errorf("postern processes remain: %v", pids)
	}
	nsAfter := netnsInodes()
	for ns, pids := range nsAfter {
		if _, ok := nsBefore[ns]; ok {
			continue
		}
		// Another process on this machine may have made a namespace meanwhile;
		// one held by anything of ours is a leak.
		for _, pid := range pids {
			if descendsFrom(pid, os.Getpid()) {
				t.Errorf("network namespace %s is still held by pid %d, started by this test", ns, pid)
			}
		}
	}
	if len(nsAfter) > len(nsBefore)+2 {
		t.Errorf("%d network namespaces before %d runs, %d after", len(nsBefore), n, len(nsAfter))
	}
	var fdsAfter []string
	eventually(2*time.Second, func() bool { fdsAfter = openFDs(); return len(fdsAfter) <= len(fdsBefore) })
	if len(fdsAfter) > len(fdsBefore) {
		t.Errorf("descriptors of the test process: %d before, %d after:\nbefore %q\nafter %q", len(fdsBefore), len(fdsAfter), fdsBefore, fdsAfter)
	}
	if tablesAfter := nftTables(t); tablesAfter != tablesBefore {
		t.Errorf("the host's nftables tables changed:\nbefore:\n%s\nafter:\n%s", tablesBefore, tablesAfter)
	}
	if rs := p.runs(t); len(rs) != n+1 {
		t.Errorf("%d runs recorded, want %d", len(rs), n+1)
	}
	// Each run's cgroup went with it.
	for _, pattern := range []string{"/sys/fs/cgroup/*/postern-run-*", "/sys/fs/cgroup/postern-run-*", "/sys/fs/cgroup/*/*/postern-run-*"} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("cgroups of runs remain: %v", left)
		}
	}
}

// TestWallHostTerminalsAreUnreachable: as root the run's uid is the host's
// root, owner of the host's terminals (/dev/pts/N, mode 620). An operator's
// terminal, here a pty of the test's with a line typed and not yet read, must
// be out of the run's reach, by its name and as /dev/tty, while the run still
// gets terminals of its own.
func TestWallHostTerminalsAreUnreachable(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	master, slave, n := hostPTY(t)
	const typed = "typed-by-the-operator"
	if _, err := master.Write([]byte(typed + "\n")); err != nil {
		t.Fatal(err)
	}
	hostName := "/dev/pts/" + strconv.Itoa(n)
	var st unix.Stat_t
	if err := unix.Stat(hostName, &st); err != nil {
		t.Fatal(err)
	}
	hostID := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	probes := step("list", "ls -A /dev/pts") +
		step("read", "timeout 2 head -c 64 "+hostName+" </dev/null") +
		step("write", "(: >"+hostName+")") +
		step("same", "stat -L -c '%d:%i' "+hostName) +
		step("devtty", "(: </dev/tty)") +
		step("script", "script -qec tty /dev/null </dev/null") +
		step("tty", "tty")

	t.Run("PipedRunInTheOperatorsSession", func(t *testing.T) {
		// 'echo prompt | postern run ...' typed in the operator's terminal:
		// postern's controlling terminal is that pty, its stdin is not.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := p.command(ctx, "run", "--", "sh", "-c", probes)
		cmd.Args = append([]string{"sh", "-c", `exec "$0" "$@" </dev/null`}, cmd.Args...)
		cmd.Path = "/bin/sh"
		ctty, err := os.OpenFile(hostName, os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer ctty.Close()
		var o, e bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ctty, &o, &e
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Run(); err != nil {
			t.Fatalf("postern run in the operator's session: %v\n%s\n%s", err, o.String(), e.String())
		}
		out := sections(o.String())
		t.Logf("host pty %s; inside:\n%s", hostName, o.String())
		if got := strings.Fields(out["list"]); !slices.Equal(got, []string{"ptmx", "rc=0"}) {
			t.Errorf("the run's /dev/pts lists %q, want only its ptmx", got)
		}
		if o := out["same"]; strings.Contains(o, hostID) {
			t.Errorf("%s inside the run is the host's terminal (%s):\n%s", hostName, hostID, o)
		}
		for _, st := range []string{"read", "write", "devtty"} {
			if o, ok := out[st]; !ok || rc(t, o) == 0 || strings.Contains(o, typed) {
				t.Errorf("%s: the run reached the operator's terminal %s:\n%s", st, hostName, o)
			}
		}
		if o := out["script"]; rc(t, o) != 0 || !regexp.MustCompile(`(?m)^/dev/pts/\d+\r?$`).MatchString(o) {
			t.Errorf("script(1) inside the wall got no terminal:\n%s", o)
		}
	})

	t.Run("InteractiveRun", func(t *testing.T) {
		out, code := p.inTerminal(t, 24, 80, strings.ReplaceAll(probes, "\n", "; "), nil)
		t.Logf("host pty %s; inside:\n%s", hostName, out)
		out = strings.ReplaceAll(out, "\r", "")
		secs := sections(out)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		// Its own terminal is pty 0 of its own instance; script's is the next.
		if got := strings.Fields(secs["list"]); !slices.Equal(got, []string{"0", "ptmx", "rc=0"}) {
			t.Errorf("the run's /dev/pts lists %q, want its own terminal and ptmx", got)
		}
		for _, st := range []string{"read", "write"} {
			if o, ok := secs[st]; !ok || rc(t, o) == 0 || strings.Contains(o, typed) {
				t.Errorf("%s: the run reached the operator's terminal %s:\n%s", st, hostName, o)
			}
		}
		if o := secs["same"]; strings.Contains(o, hostID) {
			t.Errorf("%s inside the run is the host's terminal (%s):\n%s", hostName, hostID, o)
		}
		if o := secs["devtty"]; rc(t, o) != 0 {
			t.Errorf("the interactive run has no /dev/tty:\n%s", o)
		}
		if o := secs["script"]; !strings.Contains(o, "/dev/pts/1\n") || rc(t, o) != 0 {
			t.Errorf("script(1) inside the interactive run:\n%s", o)
		}
		if o := secs["tty"]; !strings.HasPrefix(strings.TrimSpace(o), "/dev/pts/0\n") || rc(t, o) != 0 {
			t.Errorf("tty(1) in the interactive run does not name its terminal:\n%s", o)
		}
	})

	// The operator's line is still there for the operator.
	if err := slave.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	k, err := slave.Read(b)
	if err != nil || string(b[:k]) != typed+"\n" {
		t.Errorf("the operator's terminal then reads %q, %v; want the line typed before the runs", b[:k], err)
	}
}

// hostPTY opens a pseudo-terminal in the host's /dev/pts: its master, its
// slave (non-blocking, so reads take deadlines) and its number, at least 4,
// which a run's own first terminals do not share.
func hostPTY(t *testing.T) (master, slave *os.File, n int) {
	t.Helper()
	for n < 4 {
		mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("open /dev/ptmx: %v", err)
		}
		m := os.NewFile(uintptr(mfd), "ptmx")
		t.Cleanup(func() { m.Close() })
		if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		if n, err = unix.IoctlGetInt(mfd, unix.TIOCGPTN); err != nil {
			t.Fatal(err)
		}
		master = m
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open /dev/pts/%d: %v", n, err)
	}
	slave = os.NewFile(uintptr(sfd), "pts")
	t.Cleanup(func() { slave.Close() })
	return master, slave, n
}

// A terminal handed to postern as stdout only (stdin a pipe) is not handed to
// the run: a terminal descriptor can be read from, and the run would get the keys
// the person types. The run writes to a terminal of its own, copied to the
// person's.
func TestWallStdoutTerminalIsNotReadable(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	master, slave := openPTY(t, 24, 80)
	// Keys the person typed, waiting on their terminal.
	if _, err := master.Write([]byte("SECRET-KEYS\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := p.command(ctx, "run", "--", "sh", "-c",
		`test -t 1 && echo OUT-IS-TTY; stty -echo raw <&1; got=$(timeout 2 head -c 11 <&1); echo "READ[$got]"`)
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout, cmd.Stderr = slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var buf bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(&buf, master) // ends with EIO when every slave closes
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("postern run: %v", err)
	}
	// The person's own keys are still theirs to read: drain what is left.
	_ = master.SetReadDeadline(time.Now().Add(time.Second))
	<-readDone
	out := buf.String()
	if !strings.Contains(out, "OUT-IS-TTY") {
		t.Errorf("the run's stdout is not a terminal:\n%q", out)
	}
	if !strings.Contains(out, "READ[]") || strings.Contains(out, "READ[SECRET") {
		t.Errorf("the run read the person's keys from its stdout:\n%q", out)
	}
	tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 || tio.Lflag&unix.ICANON == 0 {
		t.Errorf("the run changed the person's terminal (lflag %#x): echo or canonical mode is off", tio.Lflag)
	}
}

// TestWallCallersDescriptorsStayWithPostern starts postern with a descriptor
// its caller left open (not close-on-exec, as a shell or a build tool's
// jobserver leaves them) and checks, while the run is up, that no process but
// postern itself holds it: not the wall's init, not the run.
func TestWallCallersDescriptorsStayWithPostern(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	leaked := filepath.Join(t.TempDir(), "callers-file")
	f, err := os.Create(leaked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := p.command(ctx, "run", "--", "sh", "-c", "echo up; sleep 30")
	// fds 3 to 5 in postern, not close-on-exec (the init gets its control
	// socket at 3, so 4 and 5 are what could reach it)
	cmd.ExtraFiles = []*os.File{f, f, f}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "up\n" {
		t.Fatalf("the run did not start: %q", line)
	}
	var holders []string
	procs, _ := os.ReadDir("/proc")
	for _, pe := range procs {
		pid, err := strconv.Atoi(pe.Name())
		if err != nil || pid == cmd.Process.Pid || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + pe.Name() + "/fd")
		for _, fe := range fds {
			if l, _ := os.Readlink("/proc/" + pe.Name() + "/fd/" + fe.Name()); l == leaked {
				cmdline, _ := os.ReadFile("/proc/" + pe.Name() + "/cmdline")
				holders = append(holders, fmt.Sprintf("pid %d fd %s: %s", pid, fe.Name(), strings.ReplaceAll(string(cmdline), "\x00", " ")))
			}
		}
	}
	if len(holders) > 0 {
		t.Fatalf("postern's caller's descriptor reached its children:\n%s", strings.Join(holders, "\n"))
	}
}

// nobody is the unprivileged user the tests run postern as.
const nobody = 65534

// nobodyPoster is postern run as nobody: the built binary copied where that
// user may run it, a home and a working directory of its own (home/work).
func nobodyPoster(t *testing.T) (p poster, home, work string) {
	t.Helper()
	root := testhosts.OpenDir(t, "postern-nobody-")
	bin := filepath.Join(root, "postern")
	if err := testhosts.CopyExecutable(binFor(t), bin); err != nil {
		t.Fatal(err)
	}
	home = filepath.Join(root, "home")
	work = filepath.Join(home, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	p = poster{Home: filepath.Join(home, "state"), Dir: work, Bin: bin,
		Cred: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}},
		Env:  []string{"HOME=" + home, "USER=nobody", "LOGNAME=nobody"}}
	return p, home, work
}
