//go:build linux

package benchcmd

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParseCommonAndOwnFlags(t *testing.T) {
	var (
		postern string
		skip    []string
		n       int
		quick   bool
	)
	c := Command{
		Postern: &postern,
		Skip:    &skip,
		Quick:   func() { quick = n == 7 }, // after the flags: it sees -n
		Flags:   func(fs *flag.FlagSet) { fs.IntVar(&n, "n", 0, "") },
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	out, err := c.parse(fs, []string{"-quick", "-postern", "/opt/postern", "-skip", "squid,door", "-n", "7", "-out", "r.md"})
	if err != nil {
		t.Fatal(err)
	}
	if postern != "/opt/postern" || !slices.Equal(skip, []string{"squid", "door"}) || n != 7 || !quick || out != "r.md" {
		t.Fatalf("postern %q, skip %q, n %d, quick applied %v, out %q", postern, skip, n, quick, out)
	}

	// Without a Skip there is no -skip, and without -quick Quick is not run.
	quick = false
	c = Command{Postern: &postern, Quick: func() { quick = true }}
	fs = flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := c.parse(fs, []string{"-skip", "squid"}); err == nil {
		t.Fatal("-skip was taken by a command without a Skip")
	}
	fs = flag.NewFlagSet("bench", flag.ContinueOnError)
	if _, err := c.parse(fs, nil); err != nil || quick {
		t.Fatalf("parse with no flags: %v, quick applied %v", err, quick)
	}
}
