//go:build linux

package testhosts

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Server is one server a host runs. Close stops it and waits for its goroutines;
// the host's lab closes it too.
type Server struct {
	Addr netip.AddrPort // where it listens, inside the host
	// URL is "http://ADDR/" or "https://ADDR/" for web servers, "" otherwise.
	URL string
	// CAFile is the PEM file of the CA that signed an HTTPS server's certificate.
	CAFile string

	stop func() error
	once sync.Once
	err  error
}

// Close stops the server. It is safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() { s.err = s.stop() })
	return s.err
}

// EchoReply is what the default web handler answers, as JSON, so a test can
// tell which host it reached and how.
type EchoReply struct {
	ServedBy string `json:"served_by"` // the host's Name
	Local    string `json:"local"`     // the address:port that accepted
	Remote   string `json:"remote"`    // the client as the server saw it
	Host     string `json:"host"`      // the Host header
	Method   string `json:"method"`
	URI      string `json:"uri"`
	TLS      bool   `json:"tls"`
	SNI      string `json:"sni,omitempty"`
}

// EchoHandler answers every request with an EchoReply naming host.
func EchoHandler(host string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := EchoReply{
			ServedBy: host,
			Remote:   r.RemoteAddr,
			Host:     r.Host,
			Method:   r.Method,
			URI:      r.RequestURI,
			TLS:      r.TLS != nil,
		}
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			rep.Local = a.String()
		}
		if r.TLS != nil {
			rep.SNI = r.TLS.ServerName
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Served-By", host)
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// ServeHTTP serves handler over plain HTTP on port (0: any free port). A nil
// handler means EchoHandler(h.Name).
func (h *Host) ServeHTTP(port int, handler http.Handler) (*Server, error) {
	return h.serveWeb(port, handler, nil)
}

// ServeHTTPS serves handler over TLS with a certificate from the lab's CA valid
// for names and the host's address. The returned Server's CAFile verifies it.
func (h *Host) ServeHTTPS(port int, handler http.Handler, names ...string) (*Server, error) {
	cert, err := h.lab.ca.leaf(names, []netip.Addr{h.Addr})
	if err != nil {
		return nil, fmt.Errorf("serve https on %s: %w", h.Name, err)
	}
	return h.serveWeb(port, handler, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

func (h *Host) serveWeb(port int, handler http.Handler, tlsConf *tls.Config) (*Server, error) {
	if handler == nil {
		handler = EchoHandler(h.Name)
	}
	ln, err := h.Listen(context.Background(), port)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		srv.TLSConfig = tlsConf
		ln = tls.NewListener(ln, tlsConf)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s := &Server{
		Addr: addrPortOf(ln.Addr()),
		stop: func() error {
			err := srv.Close()
			<-done
			return err
		},
	}
	s.URL = scheme + "://" + s.Addr.String() + "/"
	if tlsConf != nil {
		s.CAFile = h.lab.ca.file
	}
	if err := h.own(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeTCPEcho echoes every byte back on each connection.
func (h *Host) ServeTCPEcho(port int) (*Server, error) {
	return h.serveStream(port, echoConn)
}

// echoConn copies c back to itself through a small buffer. (io.Copy would
// splice through a pipe pair per connection: four more descriptors each, which
// matters to benchmarks holding thousands of idle connections.)
func echoConn(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// ServeBulk serves the bulk protocol: the client sends an 8-byte big-endian
// count n, the server sends n bytes and then reads until the client closes. See
// FetchBulk.
func (h *Host) ServeBulk(port int) (*Server, error) {
	return h.serveStream(port, func(c net.Conn) {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if err := writeZeros(c, int64(binary.BigEndian.Uint64(hdr[:]))); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	})
}

var zeros = make([]byte, 256<<10)

func writeZeros(w io.Writer, n int64) error {
	for n > 0 {
		chunk := zeros
		if n < int64(len(chunk)) {
			chunk = chunk[:n]
		}
		m, err := w.Write(chunk)
		n -= int64(m)
		if err != nil {
			return err
		}
	}
	return nil
}

// FetchBulk asks a bulk server at the other end of rw for n bytes and reads
// them all. It returns how many bytes arrived.
func FetchBulk(rw io.ReadWriter, n int64) (int64, error) {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	if _, err := rw.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("bulk request: %w", err)
	}
	got, err := io.CopyN(io.Discard, rw, n)
	if err != nil {
		return got, fmt.Errorf("bulk read after %d of %d bytes: %w", got, n, err)
	}
	return got, nil
}

// serveStream accepts connections and runs fn on each; Close closes the
// listener and every open connection, then waits for every fn to return.
func (h *Host) serveStream(port int, fn func(net.Conn)) (*Server, error) {
	return h.serveStreamAt(h.Addr, port, fn)
}

// serveStreamAt is serveStream on addr, an address the host holds.
func (h *Host) serveStreamAt(addr netip.Addr, port int, fn func(net.Conn)) (*Server, error) {
	var ln net.Listener
	err := h.inNS(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s at %s port %d: %w", h.Name, addr, port, err)
	}
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(5 * time.Millisecond) // e.g. EMFILE: back off, keep serving
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				fn(c)
			}()
		}
	}()
	s := &Server{
		Addr: addrPortOf(ln.Addr()),
		stop: func() error {
			err := ln.Close()
			mu.Lock()
			closed = true
			for c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
			return err
		},
	}
	if err := h.own(s); err != nil {
		return nil, err
	}
	return s, nil
}

func addrPortOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
