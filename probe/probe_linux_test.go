package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
)

const asUserEnv = "POSTERN_TEST_AS_USER"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch arg := os.Args[1]; arg {
		case netwall.InitArg:
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			os.Exit(netwall.Init(context.Background(), sigs))
		case netwall.ExecArg:
			err := netwall.ExecDropped(os.Args[2:])
			fmt.Fprintln(os.Stderr, "postern:", err)
			if errors.Is(err, netwall.ErrCommandNotFound) {
				os.Exit(127)
			}
			os.Exit(126)
		case ConnectArg, UsernsArg, NetnsArg:
			os.Exit(ChildMain(context.Background(), arg, os.Args[2:], os.Stdout))
		}
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
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
	for _, name := range []string{RungUserns, RungNetns, RungNetnsRedirect, RungIPv6, RungLandlock} {
		if !rec.Has(name) {
			t.Errorf("rung %s = %+v, want yes on this machine", name, rec.Rungs[name])
		}
	}
	if d := rec.Rungs[RungLandlock].Detail; !strings.HasPrefix(d, "abi ") || d == "abi 0" {
		t.Errorf("landlock detail %q, want \"abi N\"", d)
	}
	for name, want := range map[string]string{RungNetnsRedirect: "192.0.2.1:443", RungIPv6: "[2001:db8::1]:443"} {
		if !strings.Contains(rec.Rungs[name].Detail, want+" inside the wall reached the door") {
			t.Errorf("rung %s detail %q, want the round trip to %s", name, rec.Rungs[name].Detail, want)
		}
	}
}

// TestRunWhereUsernsIsRefused measures inside a user namespace whose limit
// of nested user namespaces is 0: every namespace rung must answer no with
// the sysctl that fixes it.
func TestRunWhereUsernsIsRefused(t *testing.T) {
	requireRoot(t)
	if os.Getenv("POSTERN_TEST_NO_USERNS") == "1" {
		rec, err := Run(context.Background(), Options{Name: "refusing"})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{RungUserns, RungNetns, RungNetnsRedirect, RungIPv6} {
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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -test.run '^TestRunWhereUsernsIsRefused$' -test.v`, self)
	cmd.Env = append(os.Environ(), "POSTERN_TEST_NO_USERNS=1", "POSTERN_REQUIRE_PRIVILEGED=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRunWhereUsernsIsRefused") {
		t.Fatalf("nested run: %v", err)
	}
}

func TestRunUnprivileged(t *testing.T) {
	if os.Getenv(asUserEnv) == "1" {
		t.Skip("already the unprivileged run")
	}
	if os.Geteuid() != 0 {
		requireRoot(t)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "postern-probe-unpriv-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const nobody = 65534
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe.test")
	if err := copyFile(self, bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^(TestRunMeasuresThisMachine|TestRunWhereUsernsIsRefused)$", "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home, "TMPDIR=" + home,
		asUserEnv + "=1", "POSTERN_REQUIRE_PRIVILEGED=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", nobody, out)
	if err != nil {
		t.Fatalf("the probe tests as uid %d failed: %v", nobody, err)
	}
	if strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "--- PASS: TestRunMeasuresThisMachine") {
		t.Fatal("the unprivileged run did not measure every rung")
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
