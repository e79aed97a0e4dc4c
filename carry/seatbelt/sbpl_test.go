package seatbelt

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// sexp is a parsed SBPL form: an atom, a string or a list.
type sexp struct {
	atom string
	str  *string
	list []sexp
}

// readSBPL reads a profile as the profile language's reader does for the
// subset postern writes: comments from ';' to the end of the line, strings in
// double quotes with backslash escaping the next character, lists in
// parentheses, and atoms. It fails on what would not read back.
func readSBPL(src string) ([]sexp, error) {
	r := &sbplReader{src: src}
	var out []sexp
	for {
		r.skip()
		if r.i >= len(r.src) {
			return out, nil
		}
		if r.src[r.i] == ')' {
			return nil, fmt.Errorf("offset %d: unbalanced ')'", r.i)
		}
		e, err := r.read()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}

type sbplReader struct {
	src string
	i   int
}

func (r *sbplReader) skip() {
	for r.i < len(r.src) {
		switch c := r.src[r.i]; {
		case c == ';':
			for r.i < len(r.src) && r.src[r.i] != '\n' {
				r.i++
			}
		case c == ' ' || c == '\n' || c == '\t':
			r.i++
		default:
			return
		}
	}
}

func (r *sbplReader) read() (sexp, error) {
	r.skip()
	if r.i >= len(r.src) {
		return sexp{}, errors.New("unexpected end")
	}
	switch r.src[r.i] {
	case '(':
		r.i++
		var l []sexp
		for {
			r.skip()
			if r.i >= len(r.src) {
				return sexp{}, errors.New("unterminated list")
			}
			if r.src[r.i] == ')' {
				r.i++
				return sexp{list: l}, nil
			}
			e, err := r.read()
			if err != nil {
				return sexp{}, err
			}
			l = append(l, e)
		}
	case '"':
		r.i++
		var b strings.Builder
		for {
			if r.i >= len(r.src) {
				return sexp{}, errors.New("unterminated string")
			}
			c := r.src[r.i]
			r.i++
			switch {
			case c == '"':
				s := b.String()
				return sexp{str: &s}, nil
			case c == '\\':
				if r.i >= len(r.src) {
					return sexp{}, errors.New("escape at end")
				}
				n := r.src[r.i]
				if n != '"' && n != '\\' {
					return sexp{}, fmt.Errorf("offset %d: escape \\%c is not one postern writes", r.i, n)
				}
				b.WriteByte(n)
				r.i++
			case c < 0x20:
				return sexp{}, fmt.Errorf("offset %d: control character %#x in a string", r.i, c)
			default:
				b.WriteByte(c)
			}
		}
	case ')':
		return sexp{}, fmt.Errorf("offset %d: unexpected ')'", r.i)
	}
	start := r.i
	for r.i < len(r.src) && !strings.ContainsRune(" \n\t();\"", rune(r.src[r.i])) {
		r.i++
	}
	return sexp{atom: r.src[start:r.i]}, nil
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "/Users/me/src", want: `"/Users/me/src"`},
		{in: `/Users/me/it's a "dir"`, want: `"/Users/me/it's a \"dir\""`},
		{in: `/a\b`, want: `"/a\\b"`},
		{in: `/a\"b`, want: `"/a\\\"b"`},
		{in: "/Users/me/café ☕", want: `"/Users/me/café ☕"`},
		{in: "/a;b)(c", want: `"/a;b)(c"`},
		{in: "", want: `""`},
		{in: "/a\nb", err: "control character 0xa"},
		{in: "/a\x00b", err: "control character 0x0"},
		{in: "/a\x7fb", err: "control character 0x7f"},
		{in: "/a\xffb", err: "not valid UTF-8"},
	} {
		got, err := Quote(tc.in)
		if tc.err != "" {
			if !errors.Is(err, ErrUnquotable) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "rename it") {
				t.Errorf("Quote(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Quote(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// FuzzQuote: whatever Quote accepts reads back as exactly one string, equal
// to its input, and nothing after it; whatever it refuses has a control
// character or is not UTF-8.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"/Users/me", `a"b`, `a\b`, `\"`, `"\`, "x)(allow default)(", "\n", "é", "\xff", `a\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Quote(s)
		if err != nil {
			if !errors.Is(err, ErrUnquotable) {
				t.Fatalf("Quote(%q): error %v is not ErrUnquotable", s, err)
			}
			if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("Quote(%q) refused a string with no control character and valid UTF-8: %v", s, err)
			}
			return
		}
		// Inside a form, followed by more: the string must end where Quote
		// ended it.
		forms, err := readSBPL("(literal " + q + ") (allow default)")
		if err != nil {
			t.Fatalf("Quote(%q) = %s does not read back: %v", s, q, err)
		}
		if len(forms) != 2 || len(forms[0].list) != 2 || forms[0].list[1].str == nil {
			t.Fatalf("Quote(%q) = %s reads back as %d forms %+v", s, q, len(forms), forms)
		}
		if got := *forms[0].list[1].str; got != s {
			t.Fatalf("Quote(%q) = %s reads back as %q", s, q, got)
		}
	})
}

func TestPathRegex(t *testing.T) {
	got := pathRegex("/Users/a.b/.git/config", true)
	want := []string{`^/[uU][sS][eE][rR][sS]/[aA]\.[bB]/\.[gG][iI][tT]/[cC][oO][nN][fF][iI][gG]$`, `^/[uU][sS][eE][rR][sS]/[aA]\.[bB]/\.[gG][iI][tT]/[cC][oO][nN][fF][iI][gG]/`}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("pathRegex = %q, want %q", got, want)
	}
	if got := pathRegex(`/x/(a)+[b]$^|{1}\é`, false); len(got) != 1 || got[0] != `^/[xX]/\([aA]\)\+\[[bB]\]\$\^\|\{1\}\\é$` {
		t.Fatalf("metacharacters: %q", got)
	}
}
