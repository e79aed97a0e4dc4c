//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
)

// TestRemoteWallEscapes makes the wall's escapes from inside a run on a
// remote machine, reached over OpenSSH's sshd, whose wall the agent shipped
// there raises: the upstream host beyond the remote records every datagram,
// echo request, lookup and connection that reaches it, and only what the
// policy admits through the door may arrive.
func TestRemoteWallEscapes(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	up := r.Link.AddrB
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The upstream's recorders, on its address on the remote's link: UDP on
	// 443 and 9999, ICMP echo requests, a resolver no run may reach, and a
	// web server on a port the policy does not list.
	udp, icmp, hits := &packetLog{}, &packetLog{}, &hitLog{}
	for _, port := range []int{443, 9999} {
		pc, err := r.Upstream.ListenPacketAt(ctx, up, port)
		if err != nil {
			t.Fatal(err)
		}
		recordPackets(t, pc, fmt.Sprintf("udp at upstream:%d", port), udp)
	}
	pc, err := listenICMPAt(r.Upstream, up)
	if err != nil {
		t.Fatal(err)
	}
	recordPackets(t, pc, "icmp at upstream", icmp)
	outside, err := r.Upstream.ServeDNSAt(up, 53, map[string][]netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Upstream.ServeHTTPAt(up, 8080, hits.handler("upstream")); err != nil {
		t.Fatal(err)
	}

	// Positive controls, sent from the remote's own namespace beside the
	// wall: each recorder hears them, so one that heard nothing from the run
	// was not deaf.
	control := "control-" + randHex(4)
	for _, c := range [][]string{
		{"sh", "-c", fmt.Sprintf("echo %s | socat -u - UDP:%s:443; echo %s | socat -u - UDP:%s:9999", control, up, control, up)},
		{"dig", "+time=3", "+tries=1", "@" + up.String(), control + ".test", "A"},
	} {
		if out, err := r.Remote.Command(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("control %v from the remote: %v\n%s", c, err, out)
		}
	}
	if err := pingFrom(r.Remote.Host, up, control); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool {
		return len(udp.containing(control)) == 2 && len(icmp.containing(control)) > 0 && outside.Asked(control+".test")
	}) {
		t.Fatalf("the upstream's recorders missed the remote's controls: udp %q, icmp %q, dns %q", udp.all(), icmp.all(), outside.Queries())
	}

	tag := "escape-" + randHex(4)
	// Where the wall failed, what the run wrote on the host goes with the test.
	t.Cleanup(func() { os.Remove("/etc/" + tag) })
	hexUp := fmt.Sprintf("%02x%02x:%02x%02x", up.As4()[0], up.As4()[1], up.As4()[2], up.As4()[3])
	leakName := tag + ".leak.test"
	script := curlStep("ok", "http://upstream.test/"+tag+"-ok") +
		// Lookups sent to the upstream as a resolver are the door's to answer.
		step("dns-udp", fmt.Sprintf("dig +time=3 +tries=1 +notcp @%s upstream.test A", up)) +
		step("dns-tcp", fmt.Sprintf("dig +time=3 +tries=1 +tcp @%s %s A", up, leakName)) +
		// No datagram but DNS leaves, none is even sent.
		step("udp-bash", fmt.Sprintf("bash -c 'echo %s > /dev/udp/%s/443'", tag, up)) +
		step("udp-socat", fmt.Sprintf("echo %s | socat -u - UDP:%s:9999", tag, up)) +
		// A port the policy does not list, by address.
		curlStep("port-8080", "--connect-timeout", "3", fmt.Sprintf("http://%s:8080/%s-8080", up, tag)) +
		// The allowed IPv4 /24 spelt as IPv6: not opened by its IPv4 CIDR.
		curlStep("nat64", "-g", fmt.Sprintf("http://[64:ff9b::%s]/%s-nat64", hexUp, tag)) +
		curlStep("6to4", "-g", fmt.Sprintf("http://[2002:%s::1]/%s-6to4", hexUp, tag)) +
		curlStep("ula", "-g", "http://[fd00::1]/"+tag+"-ula") +
		// Raw and packet sockets, ICMP.
		step("icmp-dgram", fmt.Sprintf(`/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01%s", ("%s", 0))'`, tag, up)) +
		step("raw", fmt.Sprintf(`/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01%s", ("%s", 0))'`, tag, up)) +
		// The kernel's tools, against the wall itself.
		step("veth", "ip link add pstn-"+tag[7:]+" type veth peer name pstnp-"+tag[7:]) +
		step("nft", "nft flush ruleset") +
		step("route", "ip route add 198.18.0.0/15 dev lo") +
		// The host's files and kernel settings.
		step("etc", "echo x > /etc/"+tag) +
		step("core", "echo '|/bin/true' > /proc/sys/kernel/core_pattern") +
		// And after all of it the door still works.
		curlStep("after", "http://upstream.test/"+tag+"-after")
	pol := r.policy(t)
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "far", "--policy", pol, "--resolver", r.resolver(), "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("remote run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	out := sections(stdout)
	get := func(name string) string {
		t.Helper()
		s, ok := out[name]
		if !ok {
			t.Fatalf("the remote run printed no section %q\nstdout: %s\nstderr: %s", name, stdout, stderr)
		}
		return s
	}
	for _, st := range []string{"ok", "after"} {
		if httpCode(get(st)) != 200 {
			t.Fatalf("%s: the allowed request failed on the remote:\n%s\nstderr: %s", st, get(st), stderr)
		}
	}
	statusRE := regexp.MustCompile(`status: (\w+)`)
	if s := get("dns-udp"); !strings.Contains(s, "NOERROR") || !strings.Contains(s, up.String()) {
		t.Errorf("dig @%s upstream.test over UDP: want the door's answer %s\n%s", up, up, s)
	}
	if m := statusRE.FindStringSubmatch(get("dns-tcp")); m == nil || m[1] != "NXDOMAIN" {
		t.Errorf("dig +tcp @%s %s: want the door's NXDOMAIN\n%s", up, leakName, get("dns-tcp"))
	}
	for _, st := range []string{"udp-bash", "udp-socat", "port-8080", "icmp-dgram", "raw", "veth", "nft", "route", "etc", "core"} {
		if s := get(st); rc(t, s) == 0 {
			t.Errorf("%s succeeded inside the remote's wall:\n%s", st, s)
		}
	}
	for _, st := range []string{"nat64", "6to4", "ula"} {
		if s := get(st); httpCode(s) != 403 {
			t.Errorf("%s: want the door's 403\n%s", st, s)
		}
	}
	if !strings.Contains(get("raw"), "Operation not permitted") {
		t.Errorf("a raw socket was not refused for want of the capability:\n%s", get("raw"))
	}

	// What reached the upstream: the two allowed requests, nothing else.
	time.Sleep(300 * time.Millisecond)
	if got := udp.containing(tag); len(got) != 0 {
		t.Errorf("datagrams from inside the remote's wall reached the upstream: %q", got)
	}
	if got := icmp.containing(tag); len(got) != 0 {
		t.Errorf("echo requests from inside the remote's wall reached the upstream: %q", got)
	}
	for _, q := range outside.Queries() {
		if !strings.Contains(q, control) {
			t.Errorf("the upstream's resolver was asked %q from inside the remote's wall", q)
		}
	}
	if got := hits.with(tag); len(got) != 0 {
		t.Errorf("port 8080 of the upstream was reached: %+v", got)
	}
	if _, err := os.Stat("/etc/" + tag); err == nil {
		t.Errorf("the remote run wrote /etc/%s", tag)
	}

	// The door on the remote judged the IPv6 spellings, and the record at
	// home says so.
	run := lastRun(t, r.C)
	var evs []door.Event
	for _, line := range strings.Split(strings.TrimSpace(r.C.mustPostern(t, "runs", "events", run.ID, "--json")), "\n") {
		var ev door.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "decision" {
			evs = append(evs, ev)
		}
	}
	for _, host := range []string{"64:ff9b::" + hexUp, "fd00::1"} {
		a := netip.MustParseAddr(host).String()
		found := false
		for _, ev := range evs {
			if ev.Host == a && ev.Decision == "deny" {
				found = true
			}
			if ev.Host == a && ev.Decision == "allow" {
				t.Errorf("the remote's door allowed %s: %+v", a, ev)
			}
		}
		if !found {
			t.Errorf("no deny decision for %s among the remote run's events: %+v", a, evs)
		}
	}
	if run.Denied < 3 || run.Allowed < 2 {
		t.Errorf("the remote run's record counts allowed %d, denied %d; want at least 2 and 3", run.Allowed, run.Denied)
	}
}
