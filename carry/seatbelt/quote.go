package seatbelt

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrUnquotable is a string that has no safe SBPL spelling: it holds a control
// character or is not UTF-8. Such a path is refused rather than guessed at.
var ErrUnquotable = errors.New("cannot be written in a seatbelt profile")

// Quote returns s as an SBPL string literal: in double quotes, with every
// backslash and double quote escaped by a backslash. Any other byte stands
// for itself. Control characters (and DEL) and invalid UTF-8 are refused: the
// profile language's reader would take some of them as escapes of its own,
// and a path that holds them is no place to work in.
func Quote(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q %w: it is not valid UTF-8; rename it", s, ErrUnquotable)
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("%q %w: it holds the control character %#x; rename it", s, ErrUnquotable, c)
		case c == '"' || c == '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// regexMeta are the characters a POSIX extended regular expression gives a
// meaning of its own.
const regexMeta = `\.[]()*+?{}|^$`

// pathRegex is a regular expression that matches p itself (exact) and, with
// under, everything below it too. Letters match in either case: macOS
// volumes are case-insensitive unless formatted otherwise, so ~/.ZPROFILE is
// the file zsh reads as ~/.zprofile, and a rule spelled in one case only
// would let the run create the other.
func pathRegex(p string, under bool) []string {
	var b strings.Builder
	b.WriteByte('^')
	for _, r := range p {
		switch {
		case r < utf8.RuneSelf && strings.ContainsRune(regexMeta, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case 'a' <= r && r <= 'z':
			b.WriteByte('[')
			b.WriteRune(r)
			b.WriteRune(r - 'a' + 'A')
			b.WriteByte(']')
		case 'A' <= r && r <= 'Z':
			b.WriteByte('[')
			b.WriteRune(r - 'A' + 'a')
			b.WriteRune(r)
			b.WriteByte(']')
		default:
			b.WriteRune(r)
		}
	}
	base := b.String()
	if !under {
		return []string{base + "$"}
	}
	return []string{base + "$", base + "/"}
}
