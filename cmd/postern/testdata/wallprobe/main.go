// Command wallprobe attempts, from inside the wall, the ways out that no
// installed client covers, and prints one line per attempt: "NAME ok DETAIL"
// when the kernel let it through, "NAME fail ERROR" when it did not. It exits 0
// whatever happened: judging the lines is the test's job.
//
//	wallprobe udp HOST:PORT...   send a datagram to each and wait briefly for a reply
//	wallprobe icmp ADDR          echo request over a raw and a datagram ICMP socket
//	wallprobe packet             open an AF_PACKET socket
//	wallprobe ptrace PID...      PTRACE_ATTACH to each pid
package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wallprobe udp|icmp|packet|ptrace ARGS...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "udp":
		for _, a := range args {
			udp(a)
		}
	case "icmp":
		for _, a := range args {
			icmp(a)
		}
	case "packet":
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0x0300) // htons(ETH_P_ALL)
		report("packet", "", err)
		if err == nil {
			syscall.Close(fd)
		}
	case "ptrace":
		for _, a := range args {
			pid, err := strconv.Atoi(a)
			if err != nil {
				report("ptrace "+a, "", err)
				continue
			}
			err = syscall.PtraceAttach(pid)
			report("ptrace "+a, "attached", err)
			if err == nil {
				_ = syscall.PtraceDetach(pid)
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "wallprobe: unknown probe %q\n", os.Args[1])
		os.Exit(2)
	}
}

func report(name, detail string, err error) {
	if err != nil {
		fmt.Printf("%s fail %v\n", name, err)
		return
	}
	fmt.Printf("%s ok %s\n", name, detail)
}

// udp sends one datagram and reads for a second: a wall that rejects answers
// "connection refused" at once; one that lets the datagram out answers nothing
// or the server's reply.
func udp(target string) {
	name := "udp " + target
	c, err := net.DialTimeout("udp", target, 2*time.Second)
	if err != nil {
		report(name, "", err)
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("wallprobe " + target)); err != nil {
		report(name, "", err)
		return
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	var ne net.Error
	switch {
	case err == nil:
		report(name, fmt.Sprintf("reply %q", buf[:n]), nil)
	case errors.As(err, &ne) && ne.Timeout():
		report(name, "sent, no reply", nil)
	default:
		report(name, "", err)
	}
}

// icmp sends an echo request over a raw socket (needs CAP_NET_RAW) and over
// an unprivileged ICMP datagram socket (needs net.ipv4.ping_group_range).
func icmp(target string) {
	a, err := netip.ParseAddr(target)
	if err != nil || !a.Is4() {
		report("icmp "+target, "", fmt.Errorf("want an IPv4 address: %v", err))
		return
	}
	sa := &syscall.SockaddrInet4{Addr: a.As4()}
	for _, k := range []struct {
		name string
		typ  int
	}{{"icmp-raw", syscall.SOCK_RAW}, {"icmp-dgram", syscall.SOCK_DGRAM}} {
		name := k.name + " " + target
		fd, err := syscall.Socket(syscall.AF_INET, k.typ|syscall.SOCK_CLOEXEC, syscall.IPPROTO_ICMP)
		if err != nil {
			report(name, "", err)
			continue
		}
		err = syscall.Sendto(fd, echoRequest(), 0, sa)
		syscall.Close(fd)
		report(name, "sent", err)
	}
}

func echoRequest() []byte {
	b := []byte{8, 0, 0, 0, 0x70, 0x77, 0, 1, 'w', 'a', 'l', 'l'}
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	sum = (sum >> 16) + (sum & 0xffff)
	sum += sum >> 16
	cs := ^uint16(sum)
	b[2], b[3] = byte(cs>>8), byte(cs)
	return b
}
