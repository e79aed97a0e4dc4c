package termtext

import "testing"

// Printable leaves ordinary text alone and quotes text that could act on a
// terminal or break a line.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"/home/a/.bashrc":          "/home/a/.bashrc",
		"/home/a/dépôt/.git":       "/home/a/dépôt/.git",
		"/home/a/\x1b]0;pwned\a/x": `"/home/a/\x1b]0;pwned\a/x"`,
		"/home/a/\u009b31m":        `"/home/a/\u009b31m"`,
		"/home/a/\xff":             `"/home/a/\xff"`,
		"a\nallow = [\"x\"]":       `"a\nallow = [\"x\"]"`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
}
