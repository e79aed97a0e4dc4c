// Package termtext shows text that someone else chose (a run, a remote
// machine) on a person's terminal without letting it act on the terminal.
package termtext

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable is s as a person's terminal may show it: text a run chose can
// hold control characters (escape sequences that would act on the terminal it
// is printed to, line breaks that would start a line of their own), and such
// text is shown quoted, with them escaped.
func Printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
