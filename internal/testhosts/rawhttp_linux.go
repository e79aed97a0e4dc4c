//go:build linux

package testhosts

import "net/netip"

// RawServer is a hostile HTTP/1.x server (see ServeRawHTTP) that remembers
// the requests it saw.
type RawServer struct {
	*Server
	h *rawHandler
}

// Requests returns every request the server has read so far, in order.
func (s *RawServer) Requests() []RawRequest { return s.h.requests() }

// ServeRawHTTP serves HTTP/1.x on port (0: any free port) with a server
// written on raw TCP, not net/http's: every response is written byte by byte
// as the request's path says, so a test can make any framing and timing a
// real server may produce and know the exact bytes it sent.
//
// Paths:
//
//	/bytes/<n>?seed=<s>&frame=cl|chunked|close&split=<k>&trickle=1&cut=<m>&hints=<h>&ver=1.0|1.1
//	    the body Body(n, s), framed and cut as RawQuery documents
//	/upload?frame=…&split=…&trickle=1&hints=…&ver=…
//	    any method; the body is the hex SHA-256 of the request body and "\n"
//
// Requests on a connection are read with http.ReadRequest and answered in
// order, so pipelined requests work. A request with "Expect: 100-continue"
// and a body gets "100 Continue" before the server reads the body. Every 200
// response carries X-Body-SHA256 (of the whole body, even when cut short) and
// X-Frame (the framing used). Other paths get 404 with a body saying what is
// served.
func (h *Host) ServeRawHTTP(port int, opts RawOptions) (*RawServer, error) {
	return h.ServeRawHTTPAt(h.Addr, port, opts)
}

// ServeRawHTTPAt is ServeRawHTTP on addr, an address the host holds (its own,
// or one of its links').
func (h *Host) ServeRawHTTPAt(addr netip.Addr, port int, opts RawOptions) (*RawServer, error) {
	rh := newRawHandler(opts)
	s, err := h.serveStreamAt(addr, port, rh.serveConn)
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + s.Addr.String() + "/"
	return &RawServer{Server: s, h: rh}, nil
}
