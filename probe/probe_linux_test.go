package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/probe/rung"
)

const asUserEnv = testhosts.AsUserEnv

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch arg := os.Args[1]; arg {
		case netwall.InitArg:
			os.Exit(netwall.InitMain(os.Args[2:]))
		case netwall.ExecArg:
			err := netwall.ExecDropped(os.Args[2:])
			fmt.Fprintln(os.Stderr, "postern:", err)
			if errors.Is(err, netwall.ErrCommandNotFound) {
				os.Exit(127)
			}
			os.Exit(126)
		case ConnectArg, UsernsArg, NetnsArg, OverlayArg:
			os.Exit(ChildMain(context.Background(), arg, os.Args[2:], os.Stdout))
		}
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	testhosts.Kernel(t)
	if os.Geteuid() == 0 || os.Getenv(asUserEnv) == "1" {
		return
	}
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("needs root (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping)")
	}
	t.Skip("needs root")
}

func TestRunMeasuresThisMachine(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := Run(ctx, Options{Name: "local", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measured in %d ms as %s on %s/%s %s", rec.TookMS, rec.User, rec.OS, rec.Arch, rec.Kernel)
	for name, g := range rec.Rungs {
		t.Logf("%-15s %-3s %s %s", name, g.Result, g.Detail, g.Remedy)
	}
	if rec.Name != "local" || rec.Version != "test" || rec.OS != "linux" || rec.Kernel == "" || rec.User == "" || rec.MeasuredAt.IsZero() {
		t.Errorf("host facts incomplete: %+v", rec)
	}
	for _, name := range []rung.Name{RungUserns, RungNetns, RungNetnsRedirect, RungIPv6, RungLandlock, RungOverlay} {
		if !rec.Has(name) {
			t.Errorf("rung %s = %+v, want yes on this machine", name, rec.Rungs[name])
		}
	}
	if d := rec.Rungs[RungLandlock].Detail; !strings.HasPrefix(d, "abi ") || d == "abi 0" {
		t.Errorf("landlock detail %q, want \"abi N\"", d)
	}
	for name, want := range map[rung.Name]string{RungNetnsRedirect: "192.0.2.1:443", RungIPv6: "[2001:db8::1]:443"} {
		if !strings.Contains(rec.Rungs[name].Detail, want+" inside the wall reached the door") {
			t.Errorf("rung %s detail %q, want the round trip to %s", name, rec.Rungs[name].Detail, want)
		}
	}
}

// TestRunWhereUsernsIsRefused measures inside a user namespace whose limit
// of nested user namespaces is 0. Its root holds the wall's capabilities
// there: the wall needs no user namespace, and only the userns rung answers
// no, with the sysctl that fixes it. Without a capability (run through
// setpriv) every namespace rung must answer so.
func TestRunWhereUsernsIsRefused(t *testing.T) {
	requireRoot(t)
	if os.Getenv("POSTERN_TEST_NO_USERNS") == "1" {
		rec, err := Run(context.Background(), Options{Name: "refusing"})
		if err != nil {
			t.Fatal(err)
		}
		refused := []rung.Name{RungUserns, RungNetns, RungNetnsRedirect, RungIPv6, RungOverlay}
		if netwall.HoldsInitCaps() {
			refused = refused[:1]
			for _, name := range []rung.Name{RungNetns, RungNetnsRedirect, RungIPv6, RungOverlay} {
				if g := rec.Rungs[name]; g.Result != Yes {
					t.Errorf("rung %s = %+v, want yes: the wall needs no user namespace here", name, g)
				}
			}
		}
		for _, name := range refused {
			g := rec.Rungs[name]
			t.Logf("%-15s %-3s %s; fix: %s", name, g.Result, g.Detail, g.Remedy)
			if g.Result != No || !strings.Contains(g.Remedy, "user.max_user_namespaces") {
				t.Errorf("rung %s = %+v, want no with a remedy naming user.max_user_namespaces", name, g)
			}
		}
		if !rec.Has(RungLandlock) {
			t.Errorf("landlock needs no namespace and should still answer yes: %+v", rec.Rungs[RungLandlock])
		}
		return
	}
	testhosts.RerunWithoutUserns(t, "TestRunWhereUsernsIsRefused")
	if os.Geteuid() == 0 {
		testhosts.RerunWithoutUserns(t, "TestRunWhereUsernsIsRefused", testhosts.NoCaps...)
	}
}

func TestRunUnprivileged(t *testing.T) {
	if os.Getenv(asUserEnv) == "1" {
		t.Skip("already the unprivileged run")
	}
	if os.Geteuid() != 0 {
		requireRoot(t)
	}
	testhosts.RerunAsNobody(t, "^(TestRunMeasuresThisMachine|TestRunWhereUsernsIsRefused)$", "TestRunMeasuresThisMachine")
}
