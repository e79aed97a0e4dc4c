package door

import (
	"encoding/binary"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// nflogPacket frames one IP packet as the kernel's nflog sends it: a netlink
// message of the ULOG subsystem with a packet header, a prefix and the payload.
func nflogPacket(family byte, payload []byte) []byte {
	attr := func(typ uint16, v []byte) []byte {
		b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	body := []byte{family, 0, 0, 7}
	body = append(body, attr(1, []byte{0x08, 0x00, 3, 0})...)  // packet header
	body = append(body, attr(10, []byte("x\x00"))...)          // prefix
	body = append(body, attr(nfulaPayload|0x8000, payload)...) // a flag bit set on the type
	msg := binary.NativeEndian.AppendUint32(nil, uint32(nlmsgHdrLen+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, nfnlSubsysULOG<<8|nfulnlMsgPacket)
	msg = append(msg, make([]byte, 10)...)
	return append(msg, body...)
}

func ipv4Packet(proto byte, dst string, port uint16) []byte {
	p := make([]byte, 20+8)
	p[0] = 0x45
	p[9] = proto
	a := netip.MustParseAddr(dst).As4()
	copy(p[16:20], a[:])
	binary.BigEndian.PutUint16(p[22:24], port)
	return p
}

func ipv6Packet(proto byte, dst string, port uint16) []byte {
	p := make([]byte, 40+8)
	p[0] = 0x60
	p[6] = proto
	a := netip.MustParseAddr(dst).As16()
	copy(p[24:40], a[:])
	binary.BigEndian.PutUint16(p[42:44], port)
	return p
}

func TestParseWallLog(t *testing.T) {
	var b []byte
	b = append(b, nflogPacket(afINET, ipv4Packet(protoTCP, "192.0.2.1", 8080))...)
	// Another netlink message in between is skipped.
	other := binary.NativeEndian.AppendUint32(nil, 20)
	other = binary.NativeEndian.AppendUint16(other, 2) // NLMSG_ERROR
	other = append(other, make([]byte, 14)...)
	b = append(b, other...)
	b = append(b, nflogPacket(afINET6, ipv6Packet(protoUDP, "2001:db8::1", 123))...)
	b = append(b, nflogPacket(afINET, ipv4Packet(1, "192.0.2.9", 0))...)
	frag := ipv4Packet(protoTCP, "192.0.2.2", 22)
	frag[7] = 8 // a later fragment: its bytes are not a transport header
	b = append(b, nflogPacket(afINET, frag)...)
	got, err := parseWallLog(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []refusal{
		{"tcp", netip.MustParseAddr("192.0.2.1"), 8080},
		{"udp", netip.MustParseAddr("2001:db8::1"), 123},
		{"icmp", netip.MustParseAddr("192.0.2.9"), 0},
		{"tcp", netip.MustParseAddr("192.0.2.2"), 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseWallLog =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := parseWallLog(b[:len(b)-3]); err == nil {
		t.Error("a truncated message parsed without error")
	}
}

func TestWallEventNamesFakeAddressesAndExplains(t *testing.T) {
	h := newHarness(t, mustPolicy(t, testPolicy))
	name := "a.test"
	fake, err := h.d.fakes.addr(name, false)
	if err != nil {
		t.Fatal(err)
	}
	ev := h.d.wallEvent(refusal{"tcp", fake, 8080})
	if ev.Kind != "wall" || ev.Decision != "deny" || ev.Host != name || ev.Port != 8080 ||
		!strings.Contains(ev.Reason, "port 8080 is not in the policy's ports [80, 443, 2222]") {
		t.Fatalf("wall event for a fake address: %+v", ev)
	}
	if ev := h.d.wallEvent(refusal{"udp", netip.MustParseAddr("192.0.2.1"), 9999}); ev.Host != "192.0.2.1" || !strings.Contains(ev.Reason, "only DNS") {
		t.Fatalf("wall event for udp: %+v", ev)
	}
}

// TestServeWallLogRecordsOnceAndStops feeds refusals through a real pipe:
// each is recorded, a repeat within a second is not, and closing the log
// ends the reader.
func TestServeWallLogRecordsOnceAndStops(t *testing.T) {
	checkNoLeaks(t)
	ev := &events{}
	d, err := New(Config{Policy: mustPolicy(t, testPolicy), Emit: ev.emit})
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan struct{})
	go func() { d.serveWallLog(r); close(done) }()
	pkt := nflogPacket(afINET, ipv4Packet(protoTCP, "192.0.2.1", 8080))
	for i := 0; i < 3; i++ {
		w.Write(pkt)
	}
	w.Write(nflogPacket(afINET, ipv4Packet(protoTCP, "192.0.2.1", 8081)))
	ev.waitFor(t, "the second port's refusal", func(e Event) bool { return e.Kind == "wall" && e.Port == 8081 })
	n := 0
	for _, e := range ev.all() {
		if e.Kind == "wall" && e.Port == 8080 {
			n++
		}
	}
	if n != 1 {
		t.Errorf("a refusal repeated within a second was recorded %d times, want once", n)
	}
	r.Close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the reader went on after the log was closed")
	}
	// The two held back are recorded when the door stops, as one event.
	held := d.repeats.flush()
	if len(held) != 1 || held[0].Port != 8080 || held[0].Repeats != 1 {
		t.Fatalf("held back at the stop: %+v, want one 8080 refusal standing for two", held)
	}
}

func FuzzWallLog(f *testing.F) {
	f.Add(nflogPacket(afINET, ipv4Packet(protoTCP, "192.0.2.1", 8080)))
	f.Add(nflogPacket(afINET6, ipv6Packet(protoUDP, "2001:db8::1", 53)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, _ := parseWallLog(b)
		for _, r := range rs {
			if !r.dst.IsValid() || r.proto == "" {
				t.Fatalf("refusal without a destination or protocol: %+v", r)
			}
		}
	})
}
