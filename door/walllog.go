package door

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// A wall refuses what does not lead to the door (TCP to a port outside the
// policy's, UDP other than DNS, other protocols) before the door sees it. Its
// refusing rules log the packet to an nflog group first; the door reads the
// group's netlink messages from Listeners.WallLog and records each refusal as
// a "wall" decision with a reason, as it does its own.

// Netlink and nfnetlink_log framing (linux/netlink.h, linux/netfilter/nfnetlink_log.h).
const (
	nlmsgHdrLen     = 16
	nfgenMsgLen     = 4
	nlaHdrLen       = 4
	nfnlSubsysULOG  = 4
	nfulnlMsgPacket = 0
	nfulaPayload    = 9
	nlaTypeMask     = 0x3fff
)

// refusal is one packet the wall refused, as far as its headers tell.
type refusal struct {
	proto string // "tcp", "udp", "icmp", "ipv6-icmp" or the protocol number
	dst   netip.Addr
	port  uint16 // 0 when the protocol has none
}

// errShortWallLog means a message or attribute claimed more bytes than there were.
var errShortWallLog = errors.New("truncated nflog message")

// parseWallLog reads the refusals in one read of the wall log socket: a
// sequence of netlink messages, of which the nflog packets are taken and the
// rest skipped. The packets are the run's own, so every length is checked.
func parseWallLog(b []byte) ([]refusal, error) {
	var out []refusal
	for len(b) >= nlmsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if n < nlmsgHdrLen || n > len(b) {
			return out, errShortWallLog
		}
		msg := b[nlmsgHdrLen:n]
		b = b[min(align4(n), len(b)):]
		if typ != nfnlSubsysULOG<<8|nfulnlMsgPacket || len(msg) < nfgenMsgLen {
			continue
		}
		family := msg[0]
		attrs := msg[nfgenMsgLen:]
		for len(attrs) >= nlaHdrLen {
			alen := int(binary.NativeEndian.Uint16(attrs[0:2]))
			atyp := binary.NativeEndian.Uint16(attrs[2:4]) & nlaTypeMask
			if alen < nlaHdrLen || alen > len(attrs) {
				return out, errShortWallLog
			}
			if atyp == nfulaPayload {
				if r, ok := parsePacket(family, attrs[nlaHdrLen:alen]); ok {
					out = append(out, r)
				}
			}
			attrs = attrs[min(align4(alen), len(attrs)):]
		}
	}
	return out, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// Address families in nfgenmsg (linux/socket.h) and IP protocol numbers.
const (
	afINET   = 2
	afINET6  = 10
	protoTCP = 6
	protoUDP = 17
)

// parsePacket reads the destination of an IP packet's headers.
func parsePacket(family byte, p []byte) (refusal, bool) {
	var (
		r     refusal
		proto byte
		l4    []byte
	)
	switch {
	case family == afINET && len(p) >= 20 && p[0]>>4 == 4:
		ihl := int(p[0]&0x0f) * 4
		if ihl < 20 || ihl > len(p) {
			return r, false
		}
		proto = p[9]
		r.dst = netip.AddrFrom4([4]byte(p[16:20]))
		if binary.BigEndian.Uint16(p[6:8])&0x1fff == 0 { // the first fragment holds the ports
			l4 = p[ihl:]
		}
	case family == afINET6 && len(p) >= 40 && p[0]>>4 == 6:
		proto = p[6]
		r.dst = netip.AddrFrom16([16]byte(p[24:40]))
		l4 = p[40:]
	default:
		return r, false
	}
	switch proto {
	case protoTCP:
		r.proto = "tcp"
	case protoUDP:
		r.proto = "udp"
	case 1:
		r.proto = "icmp"
	case 58:
		r.proto = "ipv6-icmp"
	default:
		r.proto = "protocol " + strconv.Itoa(int(proto))
	}
	if (proto == protoTCP || proto == protoUDP) && len(l4) >= 4 {
		r.port = binary.BigEndian.Uint16(l4[2:4])
	}
	return r, true
}

// The same refusal (protocol, address, port) is recorded at most once a
// second, with the count of the others (see repeats).

// serveWallLog records the wall's refusals until f is closed.
func (d *Door) serveWallLog(f *os.File) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if errors.Is(err, syscall.ENOBUFS) {
			// A burst overflowed the socket: those refusals are lost, the
			// later ones are not.
			d.log.Warn("door: refusals of the wall were lost (its log overflowed)")
			continue
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				d.log.Warn("door: the wall's log of refusals ended", "err", err)
			}
			return
		}
		rs, err := parseWallLog(buf[:n])
		if err != nil {
			d.log.Debug("door: part of the wall's log was unreadable", "err", err)
		}
		now := time.Now()
		for _, r := range rs {
			ev := d.wallEvent(r)
			ev.Conn = d.connID.Add(1)
			// A name's addresses (a client trying each family) are one refusal.
			key := repeatKey{kind: ev.Kind, host: ev.Host, what: r.proto, port: r.port, decision: ev.Decision}
			for _, e := range d.repeats.admit(key, ev, now) {
				d.emit(e)
			}
		}
	}
}

// serveRefused records the connects Landlock refused until refused is
// closed or the door stops.
func (d *Door) serveRefused(refused <-chan netip.AddrPort, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case dst, ok := <-refused:
			if !ok {
				return
			}
			r := refusal{proto: "tcp", dst: dst.Addr(), port: dst.Port()}
			ev := d.refusalEvent(r, true)
			ev.Conn = d.connID.Add(1)
			key := repeatKey{kind: ev.Kind, host: ev.Host, what: r.proto, port: r.port, decision: ev.Decision}
			for _, e := range d.repeats.admit(key, ev, time.Now()) {
				d.emit(e)
			}
		}
	}
}

// wallEvent is the decision recorded for a refusal of the wall's.
func (d *Door) wallEvent(r refusal) Event { return d.refusalEvent(r, false) }

// refusalEvent is the decision recorded for a refusal of the wall's, or, with
// landlock, of a connect Landlock refused before the wall saw a packet.
func (d *Door) refusalEvent(r refusal, landlock bool) Event {
	host := r.dst.String()
	if isFake(r.dst) {
		if name, ok := d.fakes.name(r.dst); ok {
			host = name
		}
	}
	pol := d.policy()
	var reason string
	switch r.proto {
	case "tcp":
		ports := make([]string, len(pol.Ports))
		for i, p := range pol.Ports {
			ports[i] = strconv.Itoa(int(p))
		}
		by := "the wall refused the connection"
		if landlock {
			by = "Landlock refused the connect (EACCES) before the wall saw a packet"
		}
		reason = fmt.Sprintf("port %d is not in the policy's ports [%s]; %s (to allow it, add %d to ports and the host to allow)",
			r.port, strings.Join(ports, ", "), by, r.port)
	case "udp":
		reason = fmt.Sprintf("udp to port %d; only DNS (port 53) leaves the wall as udp, and the door answers it; the wall refused the datagram", r.port)
	default:
		reason = fmt.Sprintf("%s; the wall lets out only tcp to the policy's ports and DNS; it dropped the packet", r.proto)
	}
	return Event{
		Event:    event.Decided,
		Kind:     event.Wall,
		Host:     host,
		Port:     r.port,
		Decision: event.Deny,
		Reason:   reason,
	}
}
