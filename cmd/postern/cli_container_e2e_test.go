//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/records"
)

// TestContainerEnvNeverOnACommandLine passes a secret to a container run
// with --env: the run sees it, no process's command line (the engine's
// client's included) ever holds it while the run goes on, and the records
// hold only its name.
func TestContainerEnvNeverOnACommandLine(t *testing.T) {
	ctrSetup(t)
	l := newE2ELab(t)
	home := ctrHomeCopy(t)
	secret, given := "s3cr3t-"+randHex(16), "g1ven-"+randHex(16)
	policy := writeFile(t, "policy.hcl", l.policyFor("enforce", []string{"web.test"}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrBin, "run", "--policy", policy, l.Resolver(), "--container", ctrImage,
		"--env", "POSTERN_TEST_SECRET", "-e", "POSTERN_TEST_GIVEN="+given, "--",
		"sh", "-c", `printf %s "$POSTERN_TEST_SECRET" | sha256sum; printf %s "$POSTERN_TEST_GIVEN" | sha256sum; sleep 1`)
	cmd.Env = append(ctrEnv(), "POSTERN_HOME="+home, "POSTERN_TEST_SECRET="+secret)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Every command line on the machine, read while the run goes on. The
	// given value is on postern's own (the person put it there); the secret
	// must be on none, and the given value on no other.
	var (
		mu    sync.Mutex
		seen  []string
		polls int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ents, _ := os.ReadDir("/proc")
			for _, ent := range ents {
				b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
				if err != nil || ent.Name() == "self" {
					continue
				}
				line := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
				mu.Lock()
				if strings.Contains(line, secret) || (strings.Contains(line, given) && !strings.HasPrefix(line, ctrBin)) {
					seen = append(seen, line)
				}
				mu.Unlock()
			}
			mu.Lock()
			polls++
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	})
	err := cmd.Wait()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("postern: %v\nstdout: %s\nstderr: %s", err, o.String(), e.String())
	}
	want := sha256Hex([]byte(secret)) + "  -\n" + sha256Hex([]byte(given)) + "  -\n"
	if o.String() != want {
		t.Fatalf("stdout %q, want the values' hashes %q\nstderr: %s", o.String(), want, e.String())
	}
	if len(seen) > 0 || polls < 10 {
		t.Fatalf("a value was on a command line (%d polls): %q", polls, seen)
	}
	run := ctrRecord(t, home)
	if run.Lane != "local-container" || !slices.Equal(run.EnvNames, []string{"POSTERN_TEST_SECRET", "POSTERN_TEST_GIVEN"}) {
		t.Fatalf("record %+v", run)
	}
	assertNowhere(t, filepath.Join(home, "records.db"), secret, given)
}

// TestContainerCommandNotStarted: a command the image does not have is 127
// and one it cannot execute 126, each said to be postern's finding (why
// not-found / not-executable), not a status the command chose.
func TestContainerCommandNotStarted(t *testing.T) {
	ctrSetup(t)
	home := ctrHomeCopy(t)
	for _, c := range []struct {
		args []string
		code int
		why  string
	}{
		{[]string{"no-such-command"}, exitNotFound, records.EndNotFound},
		{[]string{"/bin"}, exitNotExecutable, records.EndNotExecutable},
		{[]string{"sh", "-c", "exit 127"}, 127, records.EndExited},
	} {
		r := ctrPostern(t, home, append([]string{"run", "--json", "--container", ctrImage, "--container-network", "none", "--"}, c.args...)...)
		end := endObjectOf(t, r.Stderr)
		if r.Code != c.code || end.Why != c.why || end.Exit != c.code {
			t.Errorf("%q: exit %d, end %+v; want %d, %s\nstderr: %s", c.args, r.Code, end, c.code, c.why, r.Stderr)
		}
	}
}
