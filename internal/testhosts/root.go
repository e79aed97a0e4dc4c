package testhosts

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// ErrNeedsRoot means the caller is not root, and test hosts need root.
var ErrNeedsRoot = errors.New("needs root: test hosts create network namespaces and veth links")

// RequireRoot skips t with "needs root" when not running as root. When
// POSTERN_REQUIRE_PRIVILEGED=1 it fails instead, so a privileged test can never
// be skipped silently where it must run.
func RequireRoot(t testing.TB) {
	t.Helper()
	Kernel(t)
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("needs root (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping): run the tests as root")
	}
	t.Skip("needs root")
}

// RequireTool skips t with "needs TOOL (apt-get install PKG)" when tool is not
// on PATH. When POSTERN_REQUIRE_PRIVILEGED=1 it fails instead, as RequireRoot
// does: where the tests must run, a missing client is a failure, not a skip.
func RequireTool(t testing.TB, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err == nil {
		return
	}
	skipOrFail(t, fmt.Sprintf("needs %s (apt-get install %s)", tool, pkg))
}

// skipOrFail skips t with msg, or fails it when POSTERN_REQUIRE_PRIVILEGED=1.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("%s; POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping", msg)
	}
	t.Skip(msg)
}
