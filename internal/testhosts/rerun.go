package testhosts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Nobody is the unprivileged uid and gid tests run as.
const Nobody = 65534

// AsUserEnv is set to 1 in the environment of a test binary RerunAsNobody
// starts, so the tests that start it can tell they are the rerun.
const AsUserEnv = "POSTERN_TEST_AS_USER"

// RerunAsNobody runs the running test binary's tests matching pattern again as
// uid Nobody, from a copy that user can execute, with a home of its own. It
// fails t if the rerun fails, skips any test, or lacks a PASS line for each of
// wantPass, and returns its output.
func RerunAsNobody(t testing.TB, pattern string, wantPass ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := OpenDir(t, "postern-as-nobody-*")
	bin := filepath.Join(dir, filepath.Base(self))
	if err := CopyExecutable(self, bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, Nobody, Nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", pattern, "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home, "TMPDIR=" + home,
		AsUserEnv + "=1", "POSTERN_REQUIRE_PRIVILEGED=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody}}
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("as uid %d:\n%s", Nobody, out)
	if err != nil {
		t.Fatalf("the tests as uid %d failed: %v", Nobody, err)
	}
	if strings.Contains(out, "--- SKIP") {
		t.Fatalf("the run as uid %d skipped tests", Nobody)
	}
	for _, name := range wantPass {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Fatalf("the run as uid %d lacks a pass of %s", Nobody, name)
		}
	}
	return out
}

// NoCaps, as RerunWithoutUserns's wrap, runs the test binary holding no
// capability at all.
var NoCaps = []string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"}

// RerunWithoutUserns runs the running test binary's test name again inside a
// user namespace whose user.max_user_namespaces is 0, with
// POSTERN_TEST_NO_USERNS=1 so the test knows, and fails t unless it passes.
//
// wrap, if given, is a command the test binary is run through there (such as
// setpriv dropping every capability).
func RerunWithoutUserns(t testing.TB, name string, wrap ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--user", "--map-root-user", "sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$@" -test.run "^$0\$" -test.v`, name}, wrap...)
	cmd := exec.Command("unshare", append(args, self)...)
	cmd.Env = append(os.Environ(), "POSTERN_TEST_NO_USERNS=1", "POSTERN_REQUIRE_PRIVILEGED=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("%s", out)
	if err != nil || !strings.Contains(out, "--- PASS: "+name) {
		t.Fatalf("nested run of %s without user namespaces: %v", name, err)
	}
	return out
}

// CopyExecutable copies the executable src to dst (mode 0755) by way of a cp
// process, so that no descriptor open for writing on dst ever exists in this
// process. Tests fork and exec in parallel: a descriptor written here would be
// inherited by every child forked before it is closed, until that child's
// exec, and executing dst meanwhile fails with ETXTBSY ("text file busy").
func CopyExecutable(src, dst string) error {
	out, err := exec.Command("cp", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s to %s: %v: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// OpenDir is a new temporary directory every user may enter (mode 0755),
// removed when t ends: where a test has another user (Nobody) reach what it
// puts there, as a shared directory would let it.
func OpenDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
