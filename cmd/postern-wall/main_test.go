//go:build linux

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Built as make builds it, the init holds none of postern's host side: each
// package left out is package initialisers and pages every walled run's
// start would pay for.
func TestTheInitLeavesTheHostSideOut(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-tags", "postern_wallinit", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, banned := range []string{
		"github.com/postern-dev/postern/door",
		"github.com/postern-dev/postern/door/policy",
		"github.com/postern-dev/postern/records",
		"github.com/postern-dev/postern/dispatch",
		"github.com/postern-dev/postern/carry",
		"github.com/spf13/cobra",
		"github.com/hashicorp/hcl/v2",
		"go.etcd.io/bbolt",
		"golang.org/x/crypto/ssh",
		"github.com/miekg/dns",
		"net/http",
		"crypto/tls",
	} {
		for _, d := range deps {
			if d == banned {
				t.Errorf("the wall's init imports %s", banned)
			}
		}
	}
	if len(deps) > 200 {
		t.Errorf("the wall's init has %d packages; postern's host side has crept in", len(deps))
	}
}
