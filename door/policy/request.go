package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Requests inside an inspected connection are judged by method and path. The
// path a client sends is normalised first, and the door forwards the path it
// judged, never the spelling it was sent, so that no server can read a request
// as naming a different path than the one judged:
//
//   - percent-escapes are decoded, "%2F" and "%5C" included: an encoded slash
//     separates segments, as it does for the servers that decode it;
//   - a backslash separates segments (some servers read it as a slash);
//   - empty segments ("//") are dropped, "." segments removed and ".."
//     segments remove the one before (never above the root); a segment whose
//     part before ";" is "." or ".." counts as one, as servers that strip path
//     parameters see it;
//   - a path that ends in "/" keeps one trailing slash when forwarded; the
//     rules match it as if it had none;
//   - a malformed escape, or a control character or NUL (raw or decoded), is
//     refused.
//
// The query is neither judged nor changed.

// ErrBadPath is wrapped by every NormalisePath failure.
var ErrBadPath = errors.New("invalid request path")

// maxPathLen bounds a path before any work is done on it.
const maxPathLen = 16 << 10

// NormalisePath returns the canonical form of a request path (origin form,
// with or without its query, or "*"), decoded: the form the rules match. See
// EscapePath for the form sent upstream.
func NormalisePath(raw string) (string, error) {
	if raw == "*" {
		return "*", nil
	}
	if len(raw) > maxPathLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrBadPath, maxPathLen)
	}
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if !strings.HasPrefix(raw, "/") {
		return "", fmt.Errorf("%w %q: a path starts with /", ErrBadPath, raw)
	}
	dec, err := percentDecode(raw)
	if err != nil {
		return "", err
	}
	trailing := false // the path names a directory: it ends in a separator or a dot segment
	segs := make([]string, 0, strings.Count(dec, "/")+1)
	for _, seg := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		dot, _, _ := strings.Cut(seg, ";")
		switch dot {
		case ".":
			trailing = true
			continue
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			trailing = true
			continue
		}
		trailing = false
		segs = append(segs, seg)
	}
	if len(segs) == 0 {
		return "/", nil
	}
	out := "/" + strings.Join(segs, "/")
	if trailing || strings.HasSuffix(dec, "/") || strings.HasSuffix(dec, "\\") {
		out += "/"
	}
	return out, nil
}

func percentDecode(s string) (string, error) {
	if !strings.ContainsAny(s, "%") {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == 0x7f {
				return "", fmt.Errorf("%w: control character %#02x", ErrBadPath, c)
			}
		}
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				end := min(i+3, len(s))
				return "", fmt.Errorf("%w: malformed percent-escape %q", ErrBadPath, s[i:end])
			}
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("%w: control character %#02x", ErrBadPath, c)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// EscapePath is a normalised path as it goes upstream: every byte that is not
// allowed as is in a path segment (RFC 3986 pchar) is percent-encoded, "/"
// stays the separator. EscapePath("*") is "*".
func EscapePath(norm string) string {
	if norm == "*" {
		return norm
	}
	n := 0
	for i := 0; i < len(norm); i++ {
		if !pathByte(norm[i]) {
			n++
		}
	}
	if n == 0 {
		return norm
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(norm)+2*n)
	for i := 0; i < len(norm); i++ {
		c := norm[i]
		if pathByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return string(b)
}

// pathByte reports whether c may appear unescaped in a path: unreserved,
// sub-delims, ":", "@" and the "/" separator.
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// PathGlob is one allow_paths or deny_paths entry.
//
// A glob is matched against a normalised path, segment by segment: "*"
// matches any run of characters within one segment (none included), and a
// segment that is exactly "**" matches any number of whole segments, none
// included. So "/repos/acme/*" matches "/repos/acme/x" but neither
// "/repos/acme" nor "/repos/acme/x/y"; "/repos/acme/**" matches all three.
// Every other character is literal. A trailing slash means nothing, on the
// glob or the path. Deny globs match regardless of letter case (a server that
// ignores case must not let "/Repos/..." past a deny); allow globs match the
// case as written.
type PathGlob struct {
	Text string // as written in the policy
	Pos  string // "file:line:col"
	segs []string
}

// compileGlob checks and splits a glob, or says what is wrong with it.
func compileGlob(text string) (PathGlob, string) {
	g := PathGlob{Text: text}
	if !strings.HasPrefix(text, "/") {
		return g, fmt.Sprintf("a path starts with /; write %q", "/"+text)
	}
	if i := strings.IndexAny(text, "?#"); i >= 0 {
		return g, fmt.Sprintf("paths are matched without their query; write %q", text[:i])
	}
	dec, err := percentDecode(text)
	if err != nil {
		return g, err.Error()
	}
	if strings.Contains(dec, "\\") {
		return g, "a backslash separates segments in a request path; write / instead"
	}
	trimmed := strings.TrimSuffix(dec, "/")
	if trimmed == "" {
		return g, ""
	}
	for _, seg := range strings.Split(trimmed[1:], "/") {
		switch {
		case seg == "":
			return g, fmt.Sprintf("an empty segment (//) never matches a normalised path; write %q", collapseSlashes(text))
		case seg == "." || seg == "..":
			return g, "\".\" and \"..\" segments never match a normalised path; write the path they lead to"
		case strings.Contains(seg, "**") && seg != "**":
			return g, fmt.Sprintf("** matches whole segments and must be a segment of its own, as in \"/a/**\"; %q is not", seg)
		}
		g.segs = append(g.segs, seg)
	}
	return g, ""
}

func collapseSlashes(s string) string {
	for strings.Contains(s, "//") {
		s = strings.ReplaceAll(s, "//", "/")
	}
	return s
}

// Matches reports whether the glob covers the normalised path norm (see
// NormalisePath). fold compares letters regardless of case.
func (g *PathGlob) Matches(norm string, fold bool) bool {
	if norm == "*" || !strings.HasPrefix(norm, "/") {
		return false
	}
	segs := splitPath(norm)
	gs := g.segs
	if gs == nil && g.Text != "" && g.Text != "/" {
		cg, _ := compileGlob(g.Text)
		gs = cg.segs
	}
	return matchSegs(gs, segs, fold)
}

// splitPath splits a normalised path into its segments; "/" has none.
func splitPath(norm string) []string {
	t := strings.Trim(norm, "/")
	if t == "" {
		return nil
	}
	return strings.Split(t, "/")
}

// matchSegs matches glob segments against path segments. It works row by row
// over the glob (a ** row spreads to every later path position), so its cost
// is len(glob) x len(path) whatever the globs.
func matchSegs(glob, path []string, fold bool) bool {
	// cur[j]: glob[:i] matches path[:j].
	cur := make([]bool, len(path)+1)
	next := make([]bool, len(path)+1)
	cur[0] = true
	for _, g := range glob {
		clear(next)
		if g == "**" {
			seen := false
			for j := range cur {
				seen = seen || cur[j]
				next[j] = seen
			}
		} else {
			for j := 0; j < len(path); j++ {
				if cur[j] && matchSeg(g, path[j], fold) {
					next[j+1] = true
				}
			}
		}
		cur, next = next, cur
	}
	return cur[len(path)]
}

// matchSeg matches one glob segment ("*" within it) against one path segment,
// in time linear in their lengths times the stars.
func matchSeg(g, s string, fold bool) bool {
	gi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, si
			gi++
		case gi < len(g) && sameByte(g[gi], s[si], fold):
			gi++
			si++
		case star >= 0:
			gi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

func sameByte(a, b byte, fold bool) bool {
	if a == b {
		return true
	}
	if !fold {
		return false
	}
	if 'A' <= a && a <= 'Z' {
		a += 'a' - 'A'
	}
	if 'A' <= b && b <= 'Z' {
		b += 'a' - 'A'
	}
	return a == b
}
