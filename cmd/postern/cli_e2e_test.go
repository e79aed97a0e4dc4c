//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/records"
)

// jsonLines splits what 'postern run --json' wrote on stderr into postern's
// objects (by their "event") and every other line (the run's own stderr).
func jsonLines(t testing.TB, stderr string) (objs []map[string]any, other []string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m["event"] == nil {
			other = append(other, sc.Text())
			continue
		}
		objs = append(objs, m)
	}
	return objs, other
}

// endObjectOf is the one end object of a 'run --json', checked to be last.
func endObjectOf(t testing.TB, stderr string) endObject {
	t.Helper()
	objs, _ := jsonLines(t, stderr)
	if len(objs) == 0 || objs[len(objs)-1]["event"] != "end" {
		t.Fatalf("run --json: the last object is not the end object:\n%s", stderr)
	}
	n := 0
	for _, o := range objs {
		if o["event"] == "end" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("run --json: %d end objects, want 1:\n%s", n, stderr)
	}
	b, _ := json.Marshal(objs[len(objs)-1])
	var e endObject
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestUsageErrorsExit2 gives postern what it cannot take, through the
// binary: every usage error exits 2 with an error (not the help, not 0),
// and a mistyped subcommand is told what was meant.
func TestUsageErrorsExit2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "lst"}, `unknown command "lst" for "postern runs"; did you mean "list"?`},
		{[]string{"mashine", "list"}, `unknown command "mashine" for "postern"; did you mean "machine"?`},
		{[]string{"machine", "prob-confinement"}, `did you mean "probe-confinement"?`},
		{[]string{"help", "runs", "lst"}, `unknown command "lst" for "postern runs"; did you mean "list"?`},
		{[]string{"help", "nothing-like-it"}, `unknown command "nothing-like-it" for "postern"`},
		{[]string{"completion", "fsh"}, `did you mean "bash" or "fish" or "zsh"?`},
		{[]string{"runs", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"run", "--machin", "x", "--", "true"}, "unknown flag: --machin"},
		{[]string{"run", "--pids-limit", "lots", "--", "true"}, `invalid argument "lots" for "--pids-limit"`},
		{[]string{"run"}, "requires at least 1 arg"},
		{[]string{"runs", "show"}, "accepts 1 arg(s), received 0"},
		{[]string{"machine", "add", "a", "b", "--ssh", "x"}, "accepts 1 arg(s), received 2"},
		{[]string{"machine", "add", "gpu1", "--ssh", "gpu1", "--env", "K=secret"}, `"K=..."`},
		{[]string{"run", "--env", "NOT_SET_ANYWHERE_" + randHex(4), "--egress-open", "test", "--", "true"}, "is not set in postern's environment"},
		{[]string{"run", "--env", "A B=1", "--egress-open", "test", "--", "true"}, "bad environment variable name"},
	} {
		stdout, stderr, code := runPostern(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout+stderr, "Usage:") {
			t.Errorf("postern %q: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 and %q, without the help", c.args, code, stdout, stderr, c.want)
		}
		if strings.Contains(stderr, "secret") {
			t.Errorf("postern %q repeated the value: %s", c.args, stderr)
		}
	}
	// A group alone shows its help, as asked for.
	for _, args := range [][]string{{"runs"}, {"help", "runs"}, {"runs", "--help"}} {
		if stdout, stderr, code := runPostern(t, args...); code != 0 || !strings.Contains(stdout, "postern runs [command]") {
			t.Errorf("postern %q: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
}

// TestRunExitStatuses runs local walled commands through the binary: the
// run's own status passes through (77 and signals included, each told
// apart from postern's own by --json's end object), and postern's own
// failures get their own statuses, each with the record saying how the run
// ended.
func TestRunExitStatuses(t *testing.T) {
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(p.Dir, "not-executable"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noNet := []string{"--network", "none"}
	for _, c := range []struct {
		name    string
		args    []string
		code    int
		why     string
		state   records.State
		ownExit bool // the record has the command's exit status
	}{
		{"OwnStatus", append(noNet, "--", "sh", "-c", "echo OUT; exit 3"), 3, records.EndExited, records.StateExited, true},
		{"OwnSeventySeven", append(noNet, "--", "sh", "-c", "echo OUT; exit 77"), 77, records.EndExited, records.StateExited, true},
		{"Success", append(noNet, "--", "sh", "-c", "echo OUT"), 0, records.EndExited, records.StateExited, true},
		{"Signalled", append(noNet, "--", "sh", "-c", "echo OUT; kill -TERM $$"), 128 + 15, records.EndSignalled, records.StateExited, true},
		{"NotFound", append(noNet, "--", "no-such-command-"+randHex(4)), exitNotFound, records.EndNotFound, records.StateFailed, false},
		{"NotExecutable", append(noNet, "--", "./not-executable"), exitNotExecutable, records.EndNotExecutable, records.StateFailed, false},
		{"Walled", []string{"--resolver", "127.0.0.1:1", "--", "sh", "-c", "echo OUT; exit 5"}, 5, records.EndExited, records.StateExited, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := p.exec(t, append([]string{"run", "--json"}, c.args...)...)
			if r.Code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.Code, c.code, r.Stdout, r.Stderr)
			}
			end := endObjectOf(t, r.Stderr)
			run := p.lastRun(t)
			if end.Why != c.why || end.Exit != c.code || end.ID != run.ID || end.State != string(c.state) || run.End != c.why || run.State != c.state {
				t.Fatalf("end object %+v, record %+v; want why %s, exit %d, state %s", end, run, c.why, c.code, c.state)
			}
			if c.ownExit != (run.ExitCode != nil) || (c.ownExit && (*run.ExitCode != c.code || end.ExitCode == nil || *end.ExitCode != c.code)) {
				t.Fatalf("the command's own status: record %v, end object %v; want %d (%v)", run.ExitCode, end.ExitCode, c.code, c.ownExit)
			}
			// The run's stdout is its own: --json never writes there.
			if want := map[bool]string{true: "OUT\n", false: ""}[c.ownExit]; r.Stdout != want {
				t.Fatalf("stdout %q, want %q", r.Stdout, want)
			}
			if !c.ownExit && !strings.Contains(end.Error, "command") {
				t.Fatalf("end object's error %q does not say what of the command failed", end.Error)
			}
		})
	}

	t.Run("WithoutJSON", func(t *testing.T) {
		// The same statuses, and the person told on stderr.
		r := p.exec(t, "run", "--network", "none", "--", "no-such-command")
		if r.Code != exitNotFound || !strings.Contains(r.Stderr, `postern: command "no-such-command" not found`) {
			t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
		}
		r = p.exec(t, "run", "--network", "none", "--", "sh", "-c", "exit 9")
		if r.Code != 9 || r.Stderr != "postern: run "+p.lastRun(t).ID+" on local (network-wall)\n" {
			t.Fatalf("exit %d, stderr %q; want 9 and the start line alone", r.Code, r.Stderr)
		}
	})

	t.Run("UnknownMachine", func(t *testing.T) {
		r := p.exec(t, "run", "--json", "--machine", "nowhere", "--", "true")
		end := endObjectOf(t, r.Stderr)
		if r.Code != exitPostern || end.Why != records.EndStartFailed || end.ID != "" || !strings.Contains(end.Error, `machine "nowhere" is not known`) {
			t.Fatalf("exit %d, end %+v", r.Code, end)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		// Never measured: refused, 77, and the end object says so.
		fresh := poster{Home: t.TempDir(), Dir: t.TempDir()}
		r := fresh.exec(t, "run", "--json", "--", "sh", "-c", "echo RAN")
		end := endObjectOf(t, r.Stderr)
		objs, _ := jsonLines(t, r.Stderr)
		if r.Code != exitRefused || end.Why != records.EndRefused || end.State != string(records.StateRefused) || r.Stdout != "" ||
			!strings.Contains(end.Error, "EGRESS-CLOSED-DEFAULT-REFUSED") || objs[0]["event"] == "start" {
			t.Fatalf("exit %d, end %+v\nstdout %q\nstderr %s", r.Code, end, r.Stdout, r.Stderr)
		}
		r = fresh.exec(t, "run", "--", "sh", "-c", "echo RAN")
		if r.Code != exitRefused || !strings.HasPrefix(r.Stderr, "EGRESS-CLOSED-DEFAULT-REFUSED") {
			t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
		}
	})
}

var startLineRE = regexp.MustCompile(`(?m)^postern: run (\S+) on local \(network-wall\)$`)

// TestRunStartLineAndJSON: the run's id is said on stderr as it starts, -q
// silences it, and --json says start and end as objects, the run's own
// stdout and stderr left as they are.
func TestRunStartLineAndJSON(t *testing.T) {
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	script := "echo OUT; echo ERR >&2; getent hosts denied-" + randHex(3) + ".test >/dev/null; true"
	r := p.exec(t, "run", "--resolver", "127.0.0.1:1", "--", "sh", "-c", script)
	m := startLineRE.FindStringSubmatch(r.Stderr)
	run := p.lastRun(t)
	if r.Code != 0 || m == nil || m[1] != run.ID || !strings.HasPrefix(r.Stderr, m[0]) || r.Stdout != "OUT\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the start line first naming run %s", r.Code, r.Stdout, r.Stderr, run.ID)
	}
	if !strings.Contains(r.Stderr, "postern: denied dns denied-") {
		t.Fatalf("no denial on stderr: %q", r.Stderr)
	}

	r = p.exec(t, "run", "-q", "--resolver", "127.0.0.1:1", "--", "sh", "-c", script)
	if r.Code != 0 || r.Stderr != "ERR\n" || r.Stdout != "OUT\n" {
		t.Fatalf("-q: exit %d, stdout %q, stderr %q; want the run's own output alone", r.Code, r.Stdout, r.Stderr)
	}

	r = p.exec(t, "run", "--json", "--resolver", "127.0.0.1:1", "--", "sh", "-c", script)
	run = p.lastRun(t)
	objs, other := jsonLines(t, r.Stderr)
	if r.Code != 0 || r.Stdout != "OUT\n" || !slices.Equal(other, []string{"ERR"}) || len(objs) < 3 {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	start := objs[0]
	for k, want := range map[string]any{"event": "start", "id": run.ID, "machine": "local", "carry": "network-wall", "lane": "local-linux", "policy": run.Policy} {
		if start[k] != want {
			t.Errorf("start object %v: %s is %v, want %v", start, k, start[k], want)
		}
	}
	var denial map[string]any
	for _, o := range objs {
		if o["event"] == "denial" {
			denial = o
		}
	}
	if denial == nil || denial["kind"] != "dns" || !strings.HasPrefix(denial["target"].(string), "denied-") || denial["id"] != run.ID {
		t.Errorf("no denial object for the lookup: %v", objs)
	}
	end := endObjectOf(t, r.Stderr)
	if end.Why != records.EndExited || end.Exit != 0 || end.Denials < 1 || end.Denials != run.Denied || end.DurationMS <= 0 {
		t.Errorf("end object %+v, record %+v", end, run)
	}
	// Every key is there in every end object, set or not.
	last := objs[len(objs)-1]
	for _, k := range []string{"event", "id", "state", "exit", "exit_code", "why", "duration_ms", "allowed", "denials", "would_deny", "events_dropped", "error"} {
		if _, ok := last[k]; !ok {
			t.Errorf("end object %v has no %q", last, k)
		}
	}
}

// TestRunEnvNeverRecorded passes a secret to a local walled run both ways
// (--env NAME, its value here, and --env NAME=VALUE): the run sees exactly
// the values, and the records file holds neither value anywhere in its
// bytes, only the names, after a run that also made events.
func TestRunEnvNeverRecorded(t *testing.T) {
	secret, given := "s3cr3t-"+randHex(16), "g1ven-"+randHex(16)
	p := poster{Home: measuredHome(t), Dir: t.TempDir(), Env: []string{"POSTERN_TEST_SECRET=" + secret}}
	script := `printf %s "$POSTERN_TEST_SECRET" | sha256sum; printf %s "$POSTERN_TEST_GIVEN" | sha256sum; getent hosts denied-env.test >/dev/null; true`
	r := p.exec(t, "run", "--json", "--resolver", "127.0.0.1:1", "--env", "POSTERN_TEST_SECRET", "-e", "POSTERN_TEST_GIVEN="+given, "--", "sh", "-c", script)
	want := sha256Hex([]byte(secret)) + "  -\n" + sha256Hex([]byte(given)) + "  -\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("exit %d, stdout %q, want the values' hashes %q\nstderr: %s", r.Code, r.Stdout, want, r.Stderr)
	}
	run := p.lastRun(t)
	if !slices.Equal(run.EnvNames, []string{"POSTERN_TEST_SECRET", "POSTERN_TEST_GIVEN"}) || run.Denied < 1 {
		t.Fatalf("record: env names %q, denied %d", run.EnvNames, run.Denied)
	}
	objs, _ := jsonLines(t, r.Stderr)
	if env, _ := json.Marshal(objs[0]["env"]); string(env) != `["POSTERN_TEST_SECRET","POSTERN_TEST_GIVEN"]` {
		t.Errorf("start object's env %s", env)
	}
	assertNowhere(t, filepath.Join(p.Home, "records.db"), secret, given)
	for _, out := range []string{r.Stderr, p.exec(t, "runs", "show", run.ID, "--json").Stdout, p.exec(t, "runs", "events", run.ID, "--json").Stdout} {
		if strings.Contains(out, secret) || strings.Contains(out, given) {
			t.Errorf("a value was printed by postern: %s", out)
		}
	}
	// Without --env a local run starts from postern's environment as
	// before; the record then names nothing.
	r = p.exec(t, "run", "--network", "none", "--", "sh", "-c", `printf %s "$POSTERN_TEST_SECRET" | sha256sum`)
	if r.Code != 0 || r.Stdout != sha256Hex([]byte(secret))+"  -\n" || p.lastRun(t).EnvNames != nil {
		t.Fatalf("without --env: exit %d, stdout %q, names %q", r.Code, r.Stdout, p.lastRun(t).EnvNames)
	}
}

// assertNowhere fails the test if any file under path (a file or a tree)
// holds any of the values, in its raw bytes.
func assertNowhere(t testing.TB, path string, values ...string) {
	t.Helper()
	seen := 0
	err := filepath.Walk(path, func(p string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		seen++
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds the value %q", p, v)
			}
		}
		return nil
	})
	if err != nil || seen == 0 {
		t.Fatalf("nothing read under %s (%v): the check would prove nothing", path, err)
	}
}

// tmuxScreen runs script in a tmux session of its own (a terminal of
// 150x40), waits until the screen shows done, and returns the screen.
func tmuxScreen(t *testing.T, script string, done *regexp.Regexp) string {
	t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux is the terminal these lines are checked in: install it (apt-get install tmux): %v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	file := filepath.Join(dir, "session.sh")
	// The session stays after the script, so the screen can be read. The
	// script is read by sh, never executed itself: a file written here and
	// executed at once can meet ETXTBSY.
	if err := os.WriteFile(file, []byte(script+"\necho \"== rc=$?\"\nsleep 600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := tm("new-session", "-d", "-s", "t", "-x", "150", "-y", "40", "sh "+file); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := tm("capture-pane", "-p", "-t", "t")
		if err != nil {
			t.Fatalf("capture-pane: %v: %s", err, out)
		}
		if done.MatchString(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen did not show %q within 90s:\n%s", done, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertLinesAtColumnZero checks that each of postern's lines on the screen
// starts at the left edge, and that there are at least n of them.
func assertLinesAtColumnZero(t *testing.T, screen string, n int) {
	t.Helper()
	got := 0
	for _, l := range strings.Split(screen, "\n") {
		i := strings.Index(l, "postern: ")
		if i < 0 {
			continue
		}
		got++
		if i != 0 {
			t.Errorf("a line of postern's starts at column %d, not 0 (a staircase):\n%s", i, screen)
		}
	}
	if got < n {
		t.Errorf("%d lines of postern's on the screen, want at least %d:\n%s", got, n, screen)
	}
}

// TestRunTerminalLinesInTmux: with the run holding the terminal raw, the
// denials postern prints as they happen each start at column 0, in tmux as
// a person sees them.
func TestRunTerminalLinesInTmux(t *testing.T) {
	home := measuredHome(t)
	script := "cd " + sh(t.TempDir()) + " && POSTERN_HOME=" + sh(home) + " " + sh(binFor(t)) +
		" run --resolver 127.0.0.1:1 -- sh -c 'for n in one two three; do getent hosts denied-$n.test; done; sleep 0.5; echo RUN-DONE'"
	screen := tmuxScreen(t, script, regexp.MustCompile(`== rc=\d+`))
	if !strings.Contains(screen, "== rc=0") || !strings.Contains(screen, "RUN-DONE") {
		t.Fatalf("the run did not end well:\n%s", screen)
	}
	for _, n := range []string{"one", "two", "three"} {
		if !strings.Contains(screen, "postern: denied dns denied-"+n+".test") {
			t.Errorf("no denial of denied-%s.test on the screen:\n%s", n, screen)
		}
	}
	// The start line, three denials, the summary.
	assertLinesAtColumnZero(t, screen, 5)
	t.Logf("screen:\n%s", strings.TrimRight(screen, "\n"))
}

// TestMachineEnvFromInventory: an inventory's env names reach the machine
// as imported, names only; an inventory that writes a value is refused
// with the place and without the value.
func TestMachineEnvFromInventory(t *testing.T) {
	home := t.TempDir()
	p := poster{Home: home, Dir: t.TempDir()}
	inv := writeFile(t, "machines.hcl", "machine \"gpu1\" {\n  ssh = \"root@10.9.9.9\"\n  env = [\"ANTHROPIC_API_KEY\", \"HF_TOKEN\"]\n}\n")
	if r := p.exec(t, "machine", "import", inv); r.Code != 0 {
		t.Fatalf("import: exit %d\n%s", r.Code, r.Stderr)
	}
	r := p.exec(t, "machine", "list", "--json")
	var views []machineView
	if err := json.Unmarshal([]byte(r.Stdout), &views); err != nil {
		t.Fatalf("machine list --json: %v\n%s", err, r.Stdout)
	}
	i := slices.IndexFunc(views, func(v machineView) bool { return v.Name == "gpu1" })
	if i < 0 || !slices.Equal(views[i].Env, []string{"ANTHROPIC_API_KEY", "HF_TOKEN"}) {
		t.Fatalf("machine list: %+v", views)
	}
	bad := writeFile(t, "bad.hcl", "machine \"gpu2\" {\n  ssh = \"root@10.9.9.9\"\n  env = [\"HF_TOKEN=hf_s3cr3t\"]\n}\n")
	r = p.exec(t, "machine", "import", bad)
	if r.Code != exitUsage || !strings.Contains(r.Stderr, bad+":1:1: bad env name") || strings.Contains(r.Stderr, "s3cr3t") {
		t.Fatalf("import of a value: exit %d\n%s", r.Code, r.Stderr)
	}
	assertNowhere(t, filepath.Join(home, "records.db"), "s3cr3t")
}
