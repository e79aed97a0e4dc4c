package testhosts

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Frame is how a raw server's response body is delimited.
type Frame string

// The frames a raw server writes.
const (
	// FrameLength sends Content-Length and then exactly that many bytes.
	FrameLength Frame = "cl"
	// FrameChunked sends Transfer-Encoding: chunked with chunks of random
	// sizes (some with leading zeros or upper-case hex), chunk extensions and
	// a trailer. An HTTP/1.0 request gets FrameClose instead: RFC 9112 §6.1
	// forbids chunked to a 1.0 client.
	FrameChunked Frame = "chunked"
	// FrameClose sends no length: the body ends when the server closes the
	// connection ("Connection: close" under an HTTP/1.1 status line).
	FrameClose Frame = "close"
)

// RawQuery is one request for ServeRawHTTP's /bytes/ path, as a value. Its
// Path is the URL path and query that asks for it.
type RawQuery struct {
	// N is the body's length; the body is Body(N, Seed).
	N    int64
	Seed uint64
	// Frame delimits the body; "" means FrameLength.
	Frame Frame
	// Split cuts the whole response (head and body, with framing) into this
	// many writes at random points: the first cut falls inside the head, the
	// second at or next to its end, the rest anywhere. 0 or 1 means the
	// response is written whole.
	Split int
	// Trickle sleeps a little (up to RawOptions.Pause) between the writes. With
	// Split unset it means Split 16.
	Trickle bool
	// Cut, if > 0, closes the connection after that many bytes of the framed
	// body although the head promised more: an early close. (The path form
	// cut=0 closes right after the head.)
	Cut int64
	// Hints sends that many "103 Early Hints" responses before the final one
	// (to HTTP/1.1 requests only: RFC 9110 §15.2 forbids 1xx to 1.0 clients).
	Hints int
	// Version is the status line's protocol, "1.0" or "1.1"; "" answers with
	// the request's version (1.1 at most). A 1.0 status line closes the
	// connection after the response.
	Version string
}

// Path returns the URL path and query for q, e.g.
// "/bytes/13?seed=7&frame=chunked&split=5&trickle=1".
func (q RawQuery) Path() string {
	v := url.Values{}
	v.Set("seed", strconv.FormatUint(q.Seed, 10))
	if q.Frame != "" {
		v.Set("frame", string(q.Frame))
	}
	if q.Split > 0 {
		v.Set("split", strconv.Itoa(q.Split))
	}
	if q.Trickle {
		v.Set("trickle", "1")
	}
	if q.Cut > 0 {
		v.Set("cut", strconv.FormatInt(q.Cut, 10))
	}
	if q.Hints > 0 {
		v.Set("hints", strconv.Itoa(q.Hints))
	}
	if q.Version != "" {
		v.Set("ver", q.Version)
	}
	return "/bytes/" + strconv.FormatInt(q.N, 10) + "?" + v.Encode()
}

// SHA256 is the hex SHA-256 of the body q asks for (all N bytes, even when
// Cut closes early).
func (q RawQuery) SHA256() string { return BodySHA256(q.N, q.Seed) }

// rawParams is a parsed request to the raw server, with cut -1 for none.
type rawParams struct {
	RawQuery
	upload bool
	cut    int64
}

const maxRawBody = 1 << 40

var errRawPath = errors.New("raw server path")

// parseRawTarget reads a request target of the raw server: /bytes/<n>?… or
// /upload?… (the same options but N and Seed). It rejects anything else with
// an error that says what is accepted.
func parseRawTarget(target string) (rawParams, error) {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return rawParams{}, fmt.Errorf("%w %q: %v", errRawPath, target, err)
	}
	p := rawParams{cut: -1}
	switch {
	case u.Path == "/upload":
		p.upload = true
	case strings.HasPrefix(u.Path, "/bytes/"):
		n, err := strconv.ParseInt(strings.TrimPrefix(u.Path, "/bytes/"), 10, 64)
		if err != nil || n < 0 || n > maxRawBody {
			return rawParams{}, fmt.Errorf("%w %q: the length after /bytes/ must be a number from 0 to %d", errRawPath, u.Path, int64(maxRawBody))
		}
		p.N = n
	default:
		return rawParams{}, fmt.Errorf("%w %q: use /bytes/<n>?seed=&frame=cl|chunked|close&split=&trickle=1&cut=&hints=&ver= or /upload", errRawPath, u.Path)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return rawParams{}, fmt.Errorf("%w %q: query: %v", errRawPath, target, err)
	}
	num := func(key string, max int64) (int64, error) {
		s := q.Get(key)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > max {
			return 0, fmt.Errorf("%w %q: %s=%q must be a number from 0 to %d", errRawPath, target, key, s, max)
		}
		return n, nil
	}
	if s := q.Get("seed"); s != "" {
		if p.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return rawParams{}, fmt.Errorf("%w %q: seed=%q must be an unsigned number", errRawPath, target, s)
		}
	}
	switch f := Frame(q.Get("frame")); f {
	case "", FrameLength:
		p.Frame = FrameLength
	case FrameChunked, FrameClose:
		p.Frame = f
	default:
		return rawParams{}, fmt.Errorf("%w %q: frame=%q: use cl, chunked or close", errRawPath, target, f)
	}
	split, err := num("split", 1<<16)
	if err != nil {
		return rawParams{}, err
	}
	p.Split = int(split)
	switch t := q.Get("trickle"); t {
	case "", "0":
	case "1":
		p.Trickle = true
		if p.Split == 0 {
			p.Split = 16
		}
	default:
		return rawParams{}, fmt.Errorf("%w %q: trickle=%q: use 1 or 0", errRawPath, target, t)
	}
	if q.Has("cut") {
		if p.cut, err = num("cut", maxRawBody); err != nil {
			return rawParams{}, err
		}
		p.Cut = p.cut
	}
	hints, err := num("hints", 16)
	if err != nil {
		return rawParams{}, err
	}
	p.Hints = int(hints)
	switch v := q.Get("ver"); v {
	case "", "1.0", "1.1":
		p.Version = v
	default:
		return rawParams{}, fmt.Errorf("%w %q: ver=%q: use 1.0 or 1.1", errRawPath, target, v)
	}
	return p, nil
}
