package door

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/crypto/cryptobyte"
)

// What a client's first bytes are.
type headKind uint8

const (
	headOpaque headKind = iota + 1 // neither TLS nor HTTP/1
	headTLS                        // a TLS ClientHello
	headHTTP                       // an HTTP/1 request head
)

func (k headKind) String() string {
	switch k {
	case headTLS:
		return "tls"
	case headHTTP:
		return "http"
	case headOpaque:
		return "opaque"
	}
	return "unknown"
}

// maxHead bounds how many first bytes the door buffers to read a ClientHello or
// an HTTP head. A ClientHello fits one TLS record (16 KiB) in practice; one that
// is split over records is accepted up to this bound.
const maxHead = 32 << 10

var (
	// errShortHead means more bytes are needed to classify.
	errShortHead = errors.New("incomplete")
	// errHeadTooLarge means the head did not complete within maxHead bytes.
	errHeadTooLarge = fmt.Errorf("first bytes exceed %d bytes without a complete tls clienthello or http head", maxHead)
)

// firstBytes is what the door learned from a client's first bytes.
type firstBytes struct {
	kind headKind
	// name is the TLS server_name or the HTTP Host (host part as sent, may be
	// empty when the client sent none).
	name string
}

// classifyHead looks at the first bytes a client sent. It returns errShortHead
// when it needs more, and another error when the bytes claim to be TLS or HTTP
// but are malformed.
func classifyHead(b []byte) (firstBytes, error) {
	if len(b) == 0 {
		return firstBytes{}, errShortHead
	}
	if b[0] == 0x16 { // TLS handshake record
		sni, err := parseClientHello(b)
		if err != nil {
			return firstBytes{kind: headTLS}, err
		}
		return firstBytes{kind: headTLS, name: sni}, nil
	}
	if looksHTTP(b) {
		end := bytes.Index(b, []byte("\r\n\r\n"))
		if end < 0 {
			if len(b) >= maxHead {
				return firstBytes{kind: headHTTP}, errHeadTooLarge
			}
			return firstBytes{kind: headHTTP}, errShortHead
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:end+4])))
		if err != nil {
			return firstBytes{kind: headHTTP}, fmt.Errorf("malformed http request head: %w", err)
		}
		return firstBytes{kind: headHTTP, name: req.Host}, nil
	}
	return firstBytes{kind: headOpaque}, nil
}

// httpMethods are the request methods that mark an HTTP/1 client. Only known
// methods count, so that a line-based protocol ("EHLO x") is not held waiting
// for an HTTP head that never comes.
var httpMethods = []string{"GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"}

// looksHTTP reports whether b starts like an HTTP/1 request: a known method,
// a space, and (once the first line is complete) " HTTP/1." before its end.
func looksHTTP(b []byte) bool {
	for _, m := range httpMethods {
		n := len(m) + 1
		if len(b) < n {
			if bytes.HasPrefix([]byte(m+" "), b) {
				return true // could still become one; wait for more
			}
			continue
		}
		if string(b[:len(m)]) != m || b[len(m)] != ' ' {
			continue
		}
		eol := bytes.IndexByte(b, '\n')
		if eol < 0 {
			return true
		}
		line := bytes.TrimSuffix(b[:eol], []byte("\r"))
		i := bytes.LastIndexByte(line, ' ')
		return i > 0 && bytes.HasPrefix(line[i+1:], []byte("HTTP/1."))
	}
	return false
}

// parseClientHello reads a TLS ClientHello from the start of b, which may span
// several handshake records, and returns its server_name ("" if it has none).
func parseClientHello(b []byte) (string, error) {
	var hs []byte
	for {
		if len(b) < 5 {
			return "", errShortHead
		}
		typ, major := b[0], b[1]
		n := int(b[3])<<8 | int(b[4])
		if typ != 0x16 {
			return "", fmt.Errorf("tls record type %d where a handshake was expected", typ)
		}
		if major != 3 {
			return "", fmt.Errorf("tls record version %d.%d is not tls", major, b[2])
		}
		if n == 0 || n > 1<<14 {
			return "", fmt.Errorf("tls record length %d out of range", n)
		}
		if len(b) < 5+n {
			if len(b) >= maxHead {
				return "", errHeadTooLarge
			}
			return "", errShortHead
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return "", fmt.Errorf("tls handshake message %d is not a clienthello", hs[0])
		}
		msgLen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if msgLen > maxHead {
			return "", errHeadTooLarge
		}
		if len(hs) >= 4+msgLen {
			return clientHelloSNI(hs[4 : 4+msgLen])
		}
	}
}

// clientHelloSNI parses a ClientHello body (RFC 8446 4.1.2) for server_name.
func clientHelloSNI(body []byte) (string, error) {
	s := cryptobyte.String(body)
	var (
		version   uint16
		random    []byte
		sessionID cryptobyte.String
		suites    cryptobyte.String
		comp      cryptobyte.String
	)
	if !s.ReadUint16(&version) || !s.ReadBytes(&random, 32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 ||
		!s.ReadUint16LengthPrefixed(&suites) || len(suites) < 2 || len(suites)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&comp) || len(comp) < 1 {
		return "", errors.New("malformed tls clienthello")
	}
	if s.Empty() {
		return "", nil // no extensions
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return "", errors.New("malformed tls clienthello extensions")
	}
	sni := ""
	seen := false
	for !exts.Empty() {
		var (
			typ  uint16
			data cryptobyte.String
		)
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", errors.New("malformed tls clienthello extension")
		}
		if typ != 0 { // server_name
			continue
		}
		if seen {
			return "", errors.New("tls clienthello has two server_name extensions")
		}
		seen = true
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
			return "", errors.New("malformed tls server_name extension")
		}
		for !list.Empty() {
			var (
				nameType uint8
				name     cryptobyte.String
			)
			if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) || len(name) == 0 {
				return "", errors.New("malformed tls server_name entry")
			}
			if nameType != 0 {
				continue
			}
			if sni != "" {
				return "", errors.New("tls server_name lists two host names")
			}
			sni = string(name)
		}
	}
	return sni, nil
}
