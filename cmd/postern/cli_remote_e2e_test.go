//go:build linux

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/records"
)

// TestRemoteRunEnvStatusesAndTerminal carries the CLI's promises to a
// machine reached over a real OpenSSH sshd: --env and the machine's env
// names reach the remote run through the agent (values nowhere in the
// records, nor in any file on the remote), statuses pass through or say
// what failed, postern's lines start at column 0 in tmux while the remote
// run holds the terminal, a lost connection is 255 and an unreachable
// machine 125.
func TestRemoteRunEnvStatusesAndTerminal(t *testing.T) {
	r := newRemoteLab(t)
	secret, machineSecret, unpassed, given := "s3cr3t-"+randHex(16), "m4ch1ne-"+randHex(16), "unp4ssed-"+randHex(16), "g1ven-"+randHex(16)
	r.C.Env = []string{"POSTERN_TEST_SECRET=" + secret, "POSTERN_MACHINE_SECRET=" + machineSecret, "POSTERN_UNPASSED=" + unpassed}
	r.C.writeSSH(t, "config", fmt.Sprintf("Host far-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n  IdentitiesOnly yes\n", r.Remote.Addr))
	r.C.trust(t, r.Remote.Addr.String(), r.Remote.HostPub)
	r.C.mustPostern(t, "machine", "add", "far", "--ssh", "far-alias", "--env", "POSTERN_MACHINE_SECRET")
	r.C.mustPostern(t, "machine", "probe-confinement", "far")
	runFlags := []string{"run", "--machine", "far", "--policy", r.policy(t), "--resolver", r.resolver()}

	t.Run("Env", func(t *testing.T) {
		script := `printf %s "$POSTERN_TEST_SECRET" | sha256sum; printf %s "$POSTERN_MACHINE_SECRET" | sha256sum; printf %s "$POSTERN_GIVEN" | sha256sum; echo "[$POSTERN_UNPASSED]"; getent hosts denied-env.test >/dev/null; true`
		stdout, stderr, code := r.C.postern(t, append(runFlags, "--json", "--env", "POSTERN_TEST_SECRET", "-e", "POSTERN_GIVEN="+given, "--", "sh", "-c", script)...)
		want := sha256Hex([]byte(secret)) + "  -\n" + sha256Hex([]byte(machineSecret)) + "  -\n" + sha256Hex([]byte(given)) + "  -\n[]\n"
		if code != 0 || stdout != want {
			t.Fatalf("exit %d, stdout %q, want %q (the values' hashes, and nothing of what was not passed)\nstderr: %s", code, stdout, want, stderr)
		}
		run := lastRun(t, r.C)
		if !slices.Equal(run.EnvNames, []string{"POSTERN_MACHINE_SECRET", "POSTERN_TEST_SECRET", "POSTERN_GIVEN"}) || run.Denied < 1 {
			t.Fatalf("record: env names %q, denied %d", run.EnvNames, run.Denied)
		}
		values := []string{secret, machineSecret, given, unpassed}
		assertNowhere(t, filepath.Join(r.C.PosternHome, "records.db"), values...)
		// The agent on the remote keeps nothing of them either.
		assertNowhere(t, r.Remote.Home, values...)
		machines := r.C.mustPostern(t, "machine", "list", "--json")
		if show := r.C.mustPostern(t, "machine", "show", "far"); !regexp.MustCompile(`(?m)^env +POSTERN_MACHINE_SECRET `).MatchString(show) {
			t.Errorf("machine show does not name the machine's env:\n%s", show)
		}
		for _, v := range values {
			if strings.Contains(stderr, v) || strings.Contains(machines, v) {
				t.Errorf("postern printed the value %q:\n%s\n%s", v, stderr, machines)
			}
		}
	})

	t.Run("Statuses", func(t *testing.T) {
		stdout, stderr, code := r.C.postern(t, append(runFlags, "--json", "--", "sh", "-c", "echo OUT; exit 3")...)
		end := endObjectOf(t, stderr)
		if code != 3 || stdout != "OUT\n" || end.Why != records.EndExited || end.ExitCode == nil || *end.ExitCode != 3 {
			t.Fatalf("exit 3: postern exit %d, stdout %q, end %+v", code, stdout, end)
		}
		_, stderr, code = r.C.postern(t, append(runFlags, "--json", "--", "no-such-command-"+randHex(3))...)
		end = endObjectOf(t, stderr)
		run := lastRun(t, r.C)
		if code != exitNotFound || end.Why != records.EndNotFound || run.End != records.EndNotFound || !strings.Contains(end.Error, "on machine far") {
			t.Fatalf("not found: exit %d, end %+v, record %+v", code, end, run)
		}
		// The remote shares this machine's filesystem: a file made here is there.
		plain := writeFile(t, "plain", "#!/bin/sh\necho ran\n")
		_, stderr, code = r.C.postern(t, append(runFlags, "--json", "--", plain)...)
		end = endObjectOf(t, stderr)
		if code != exitNotExecutable || end.Why != records.EndNotExecutable {
			t.Fatalf("not executable: exit %d, end %+v", code, end)
		}
	})

	t.Run("TerminalLinesInTmux", func(t *testing.T) {
		var env strings.Builder
		for _, kv := range r.C.env() {
			k, v, _ := strings.Cut(kv, "=")
			if k == "" || strings.ContainsAny(k, " ()-.") {
				continue
			}
			fmt.Fprintf(&env, "export %s=%s\n", k, sh(v))
		}
		args := append(append([]string{}, runFlags...), "--", "sh", "-c", "for n in one two three; do getent hosts denied-$n.test; done; sleep 0.5; echo RUN-DONE")
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = sh(a)
		}
		screen := tmuxScreen(t, env.String()+sh(binFor(t))+" "+strings.Join(quoted, " "), regexp.MustCompile(`== rc=\d+`))
		if !strings.Contains(screen, "== rc=0") || !strings.Contains(screen, "RUN-DONE") {
			t.Fatalf("the remote run did not end well:\n%s", screen)
		}
		for _, n := range []string{"one", "two", "three"} {
			if !strings.Contains(screen, "postern: denied dns denied-"+n+".test") {
				t.Errorf("no denial of denied-%s.test on the screen:\n%s", n, screen)
			}
		}
		assertLinesAtColumnZero(t, screen, 5)
		t.Logf("screen:\n%s", strings.TrimRight(screen, "\n"))
	})

	t.Run("Lost", func(t *testing.T) {
		marker := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		cmd := exec.Command(binFor(t), append(runFlags, "--json", "--", "sh", "-c", "sleep 300."+marker)...)
		cmd.Env = r.C.env()
		_, stderr, waited := startBackground(t, cmd)
		waitUntil(t, 20*time.Second, "the remote run to start", func() bool { return len(pgrepPids(t, "^sleep 300."+marker+"$")) > 0 })
		for _, pid := range sshdTree(r.Remote.cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-waited:
		case <-time.After(20 * time.Second):
			t.Fatalf("postern still runs 20s after sshd was killed:\n%s", stderr.String())
		}
		end := endObjectOf(t, stderr.String())
		if code := cmd.ProcessState.ExitCode(); code != exitLost || end.Why != records.EndLost || end.Exit != exitLost || end.ExitCode != nil {
			t.Fatalf("lost: exit %d, end %+v\nstderr: %s", code, end, stderr.String())
		}
		if run := lastRun(t, r.C); run.State != records.StateLost || run.End != records.EndLost {
			t.Fatalf("lost: record %+v", run)
		}
		// sshd is gone: the machine, measured, cannot be reached. That is
		// postern failing to start the run, 125, not the run's status.
		_, stderr2, code := r.C.postern(t, append(runFlags, "--connect-timeout", "3s", "--json", "--", "true")...)
		end = endObjectOf(t, stderr2)
		if code != exitPostern || end.Why != records.EndStartFailed || !strings.Contains(end.Error, "far") {
			t.Fatalf("unreachable: exit %d, end %+v", code, end)
		}
	})
}
