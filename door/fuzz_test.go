package door

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// clientHelloBytes captures the ClientHello crypto/tls sends for serverName.
func clientHelloBytes(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""}).Handshake()
	}()
	var buf bytes.Buffer
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	tmp := make([]byte, 4096)
	for {
		n, err := b.Read(tmp)
		buf.Write(tmp[:n])
		if _, cerr := classifyHead(buf.Bytes()); !errors.Is(cerr, errShortHead) || err != nil {
			break
		}
	}
	b.Close()
	a.Close()
	<-done
	return buf.Bytes()
}

func TestClassifyHead(t *testing.T) {
	hello := clientHelloBytes(t, "a.test")
	fb, err := classifyHead(hello)
	if err != nil || fb.kind != headTLS || fb.name != "a.test" {
		t.Fatalf("real ClientHello: %+v %v", fb, err)
	}
	// The same ClientHello split over two records still parses.
	body := hello[5:]
	split := append([]byte{0x16, 3, 1, 0, 10}, body[:10]...)
	split = append(split, 0x16, 3, 1, byte((len(body)-10)>>8), byte(len(body)-10))
	split = append(split, body[10:]...)
	if fb, err := classifyHead(split); err != nil || fb.name != "a.test" {
		t.Fatalf("split ClientHello: %+v %v", fb, err)
	}
	for i := 1; i < len(hello); i += 97 {
		if _, err := classifyHead(hello[:i]); !errors.Is(err, errShortHead) {
			t.Fatalf("ClientHello cut at %d: %v, want short", i, err)
		}
	}
	noSNI := clientHelloBytes(t, "")
	if fb, err := classifyHead(noSNI); err != nil || fb.kind != headTLS || fb.name != "" {
		t.Fatalf("no sni: %+v %v", fb, err)
	}
	tests := []struct {
		in   string
		kind headKind
		name string
		err  string
	}{
		{"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", headHTTP, "a.test", ""},
		{"POST /x HTTP/1.0\r\nhost:  b.test:8080 \r\nContent-Length: 0\r\n\r\n", headHTTP, "b.test:8080", ""},
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", headHTTP, "", "malformed http"},
		{"GET / HTTP/1.1\r\nHost: a.test\r\n", headHTTP, "", "incomplete"},
		{"GE", headHTTP, "", "incomplete"},
		{"EHLO mail.test\r\n", headOpaque, "", ""},
		{"GET /this is not http\r\n", headOpaque, "", ""},
		{"SSH-2.0-OpenSSH_9.2\r\n", headOpaque, "", ""},
		{"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", headTLS, "", "not a clienthello"},
		{"\x16\x02\x01\x00\x05", headTLS, "", "not tls"},
	}
	for _, tt := range tests {
		fb, err := classifyHead([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("classifyHead(%q) error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || fb.kind != tt.kind || fb.name != tt.name {
			t.Errorf("classifyHead(%q) = %+v %v, want %s %q", tt.in, fb, err, tt.kind, tt.name)
		}
	}
}

// FuzzClassifyHead feeds arbitrary first bytes (TLS ClientHellos, HTTP heads,
// anything) to the classifier: it must not panic, must be deterministic, and
// a complete verdict must not change when more bytes follow.
func FuzzClassifyHead(f *testing.F) {
	f.Add(clientHelloBytes(f, "a.test"))
	f.Add(clientHelloBytes(f, ""))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("CONNECT a.test:443 HTTP/1.1\r\n\r\n"))
	f.Add([]byte("\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fb, err := classifyHead(b)
		fb2, err2 := classifyHead(b)
		if fb != fb2 || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic")
		}
		if err == nil && fb.kind == headTLS {
			more, err3 := classifyHead(append(bytes.Clone(b), 0x17, 3, 3, 0, 1, 0))
			if err3 != nil || more != fb {
				t.Fatalf("complete ClientHello changed with trailing bytes: %+v %v", more, err3)
			}
		}
	})
}

// FuzzParseClientHello fuzzes the ClientHello body parser directly.
func FuzzParseClientHello(f *testing.F) {
	h := clientHelloBytes(f, "a.test")
	f.Add(h[9:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		sni, err := clientHelloSNI(body)
		if err != nil && sni != "" {
			t.Fatalf("error with a name")
		}
	})
}

// FuzzProxyHead sends arbitrary bytes to the explicit proxy: it must answer
// or close without panicking or hanging, and never dial anything it did not
// judge (the dial seam here refuses every dial).
func FuzzProxyHead(f *testing.F) {
	f.Add([]byte("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n"))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\nGET http://b.test/ HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	f.Add([]byte("CONNECT [::1]:22 HTTP/1.1\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	pol := mustPolicy(f, testPolicy)
	l := listen(f)
	defer l.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := New(Config{Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		d.lookup = func(context.Context, string) ([]netip.Addr, error) { return nil, errNoSuchHost }
		d.dial = func(context.Context, netip.AddrPort) (net.Conn, error) { return nil, errors.New("no dialling in fuzz") }
		client, door := tcpPair(t, l)
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.serveProxy(context.Background(), door)
			door.Close()
		}()
		client.SetDeadline(time.Now().Add(5 * time.Second))
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			client.Write(in)
			client.CloseWrite()
		}()
		io.Copy(io.Discard, client)
		client.Close()
		<-wrote
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("proxy handler did not finish")
		}
	})
}

// tcpPair returns both ends of one loopback TCP connection.
func tcpPair(t testing.TB, l net.Listener) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// FuzzDNSReply unpacks arbitrary packets and answers them: the reply must
// always pack, and never carry an answer for a name the policy denies.
func FuzzDNSReply(f *testing.F) {
	for _, q := range []struct {
		name string
		t    uint16
	}{{"a.test.", dns.TypeA}, {"bad.a.test.", dns.TypeAAAA}, {"1.0.18.198.in-addr.arpa.", dns.TypePTR}, {"a.test.", dns.TypeTXT}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.t)
		m.SetEdns0(1232, false)
		b, _ := m.Pack()
		f.Add(b)
	}
	pol := mustPolicy(f, testPolicy)
	d, err := New(Config{Policy: pol})
	if err != nil {
		f.Fatal(err)
	}
	d.lookup = func(context.Context, string) ([]netip.Addr, error) {
		panic("the DNS side must never resolve")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := new(dns.Msg)
		if r.Unpack(b) != nil {
			return
		}
		m := d.dnsReply(r, nil)
		if _, err := m.Pack(); err != nil {
			t.Fatalf("reply does not pack: %v\n%v", err, m)
		}
		for _, rr := range m.Answer {
			if strings.HasSuffix(strings.ToLower(rr.Header().Name), "bad.a.test.") {
				t.Fatalf("answered a denied name: %v", rr)
			}
		}
	})
}
