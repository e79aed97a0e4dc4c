package workspace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// BundleHeader is what a git bundle says before its pack: the commits it
// needs the receiver to have, and the refs it carries.
type BundleHeader struct {
	Version       int
	Prerequisites []string
	Refs          []BundleRef
}

// BundleRef is one ref a bundle carries.
type BundleRef struct {
	SHA  string
	Name string
}

// ErrBadBundle is a bundle whose header does not parse.
var ErrBadBundle = errors.New("not a git bundle")

// maxBundleHeader bounds the header read before the pack.
const maxBundleHeader = 64 << 10

// ParseBundleHeader reads a bundle's header (git's v2 or v3 format) from the
// start of r, reading no more than maxBundleHeader bytes.
func ParseBundleHeader(r io.Reader) (*BundleHeader, error) {
	br := bufio.NewReader(io.LimitReader(r, maxBundleHeader))
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: no signature line", ErrBadBundle)
	}
	h := &BundleHeader{}
	switch line {
	case "# v2 git bundle\n":
		h.Version = 2
	case "# v3 git bundle\n":
		h.Version = 3
	default:
		return nil, fmt.Errorf("%w: signature %q", ErrBadBundle, strings.TrimSpace(line))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("%w: the header does not end within %d bytes", ErrBadBundle, maxBundleHeader)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return h, nil
		case strings.HasPrefix(line, "@"):
			if h.Version < 3 {
				return nil, fmt.Errorf("%w: a capability in a v2 bundle", ErrBadBundle)
			}
			// A filtered bundle (@filter=) lacks objects its commits
			// need: a result is never made so, and none is taken.
			if c := strings.TrimPrefix(line, "@"); c != "object-format=sha1" && c != "object-format=sha256" {
				return nil, fmt.Errorf("%w: unknown capability %q", ErrBadBundle, c)
			}
		case strings.HasPrefix(line, "-"):
			sha, _, _ := strings.Cut(line[1:], " ")
			if !validSHA(sha) {
				return nil, fmt.Errorf("%w: prerequisite %q", ErrBadBundle, sha)
			}
			h.Prerequisites = append(h.Prerequisites, sha)
		default:
			sha, name, ok := strings.Cut(line, " ")
			if !ok || !validSHA(sha) || name == "" || bytes.ContainsAny([]byte(name), " \x00\t") {
				return nil, fmt.Errorf("%w: ref line %q", ErrBadBundle, line)
			}
			h.Refs = append(h.Refs, BundleRef{SHA: sha, Name: name})
		}
	}
}
