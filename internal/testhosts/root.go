package testhosts

import (
	"errors"
	"os"
	"testing"
)

// ErrNeedsRoot means the caller is not root, and test hosts need root.
var ErrNeedsRoot = errors.New("needs root: test hosts create network namespaces and veth links")

// RequireRoot skips t with "needs root" when not running as root. When
// POSTERN_REQUIRE_PRIVILEGED=1 it fails instead, so a privileged test can never
// be skipped silently where it must run.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("needs root (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping): run the tests as root")
	}
	t.Skip("needs root")
}
