package probe

// This test needs a Mac: it measures the seatbelt rung as postern does, with
// the test binary standing in for postern's own hidden entry points.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/postern-dev/postern/carry/seatbelt"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case seatbelt.ExecArg:
			err := seatbelt.ExecMain(os.Args[2:])
			fmt.Fprintln(os.Stderr, err)
			if errors.Is(err, seatbelt.ErrCommandNotFound) {
				os.Exit(127)
			}
			os.Exit(126)
		case SeatbeltArg:
			os.Exit(ChildMain(context.Background(), SeatbeltArg, os.Args[2:], os.Stdout))
		}
	}
	os.Exit(m.Run())
}

func TestSeatbeltRung(t *testing.T) {
	g := measureSeatbelt(context.Background())
	if g.Result != Yes {
		t.Fatalf("seatbelt-network-deny: %s: %s (remedy %q)", g.Result, g.Detail, g.Remedy)
	}
	if v := osVersion(); v == "" || !strings.Contains(g.Detail, "macOS "+v) {
		t.Errorf("the detail %q does not name the macOS version %q", g.Detail, v)
	}
	for _, want := range []string{"answered", "was refused", "mDNSResponder's socket was refused"} {
		if !strings.Contains(g.Detail, want) {
			t.Errorf("detail %q lacks %q", g.Detail, want)
		}
	}
}
