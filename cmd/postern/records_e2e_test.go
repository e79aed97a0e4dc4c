//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/records"
)

// The records' end-to-end tests damage, fill and hold the records file of the
// built binary, and check what postern says and that the file is left as it
// was.

// storeCommands are the commands every damaged store is tried with.
var storeCommands = [][]string{
	{"runs", "list"},
	{"run", "--egress-open", "test of a damaged store", "--", "true"},
	{"machine", "show", "local"},
}

// storeFailure is the exit status of a store command whose records cannot
// be used: 125 for a run (postern could not start it), 1 for the others.
func storeFailure(args []string) int {
	if args[0] == "run" {
		return exitPostern
	}
	return 1
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.IsDir() {
		return "directory"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// checkNoPanic fails if a Go panic or fault reached stderr.
func checkNoPanic(t *testing.T, stderr string) {
	t.Helper()
	for _, s := range []string{"panic:", "goroutine ", "SIGSEGV", "SIGBUS", "fatal error"} {
		if strings.Contains(stderr, s) {
			t.Fatalf("postern crashed:\n%s", stderr)
		}
	}
}

func TestRecordsDamagedStoreIsNamedNeverWiped(t *testing.T) {
	testhosts.EndToEnd(t)
	// A store with a machine in it, to damage in several ways.
	tmpl := t.TempDir()
	if _, e, code := (poster{Home: tmpl}).do(t, "machine", "add", "gpu1", "--ssh", "root@10.255.255.1"); code != 0 {
		t.Fatalf("machine add: exit %d: %s", code, e)
	}
	good, err := os.ReadFile(filepath.Join(tmpl, "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		make  func(path string) error
		found string
	}{
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, "an empty file (0 bytes)"},
		{"cut short", func(p string) error { return os.WriteFile(p, good[:3*4096+100], 0o600) }, "cut short"},
		{"garbage", func(p string) error {
			return os.WriteFile(p, bytes.Repeat([]byte("not a database "), 4096), 0o600)
		}, "not a bbolt database"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, "records.db")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			before := fileSum(t, path)
			for _, args := range storeCommands {
				_, stderr, code := (poster{Home: home}).do(t, args...)
				checkNoPanic(t, stderr)
				want := "postern: records file " + path + " is damaged (" + tc.found
				if code != storeFailure(args) || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "postern changed nothing in it") ||
					!strings.Contains(stderr, "move it aside (mv "+path+" "+path+".damaged)") || !strings.Contains(stderr, "postern machine probe-confinement") {
					t.Fatalf("postern %v: exit %d, stderr %q; want exit %d and %q with the fix", args, code, stderr, storeFailure(args), want)
				}
				if fileSum(t, path) != before {
					t.Fatalf("postern %v changed the damaged store", args)
				}
			}
		})
	}
}

func TestRecordsWithoutPermission(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	home := testhosts.OpenDir(t, "postern-records-perm-")
	if _, e, code := (poster{Home: home}).do(t, "runs", "list"); code != 0 {
		t.Fatalf("runs list: %s", e)
	}
	bin := filepath.Join(home, "postern")
	if err := testhosts.CopyExecutable(binFor(t), bin); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "records.db")
	before := fileSum(t, path)
	nobody := poster{Home: home, Bin: bin, Dir: "/", Cred: &syscall.Credential{Uid: 65534, Gid: 65534}, Env: []string{"HOME=/nonexistent"}}
	for _, args := range storeCommands {
		_, stderr, code := nobody.do(t, args...)
		checkNoPanic(t, stderr)
		if code != storeFailure(args) || !strings.Contains(stderr, "records file "+path) || !strings.Contains(stderr, "permission denied") ||
			!strings.Contains(stderr, "owned by uid 0") || !strings.Contains(stderr, "set POSTERN_HOME to a directory of your own") {
			t.Fatalf("postern %v as another user: exit %d, stderr %q", args, code, stderr)
		}
	}
	if fileSum(t, path) != before {
		t.Fatal("the store was changed")
	}
}

// A store another process holds is an error naming it after the lock timeout,
// for each command; a holder that was killed holds nothing.
func TestRecordsLockedStore(t *testing.T) {
	testhosts.EndToEnd(t)
	home := t.TempDir()
	if _, e, code := (poster{Home: home}).do(t, "runs", "list"); code != 0 {
		t.Fatalf("runs list: %s", e)
	}
	path := filepath.Join(home, "records.db")
	// The process that locks ends; the one it started keeps the lock.
	holder := exec.Command("flock", "-x", path, "sh", "-c", "exec sleep 60 </dev/null >/dev/null 2>&1 & echo $!")
	out, err := holder.Output()
	if err != nil {
		t.Fatalf("flock: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("flock's child: %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	var wg sync.WaitGroup
	for _, args := range storeCommands {
		wg.Go(func() {
			start := time.Now()
			_, stderr, code := (poster{Home: home}).do(t, args...)
			took := time.Since(start)
			checkNoPanic(t, stderr)
			want := fmt.Sprintf("postern: records file %s is held by pid %d (sleep) and was not let go within 10s", path, pid)
			if code != storeFailure(args) || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "end that process") {
				t.Errorf("postern %v: exit %d, stderr %q; want %q", args, code, stderr, want)
			}
			if took < 9*time.Second || took > 25*time.Second {
				t.Errorf("postern %v gave up after %s, want about 10s", args, took)
			}
		})
	}
	wg.Wait()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, stderr, code := (poster{Home: home}).do(t, "runs", "list")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the holder was killed: exit %d: %s", code, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do runs postern to completion and returns what it printed and its status.
func (p poster) do(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	r := p.exec(t, args...)
	return r.Stdout, r.Stderr, r.Code
}

// The records are out of a run's reach wherever they are (here in its
// working directory): the run cannot empty them, and its record is written.
// Emptied from outside while a run goes on, the store is not made afresh:
// postern says the record could not be written, with its own failure status.
func TestRecordsEmptiedByTheRun(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "postern-home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	copyStore(t, measuredHome(t), home)
	path := filepath.Join(home, "records.db")
	p := poster{Home: home, Dir: dir}
	r := p.exec(t, "run", "--", "sh", "-c", `if (: > "$POSTERN_HOME/records.db") 2>/dev/null; then echo emptied; else echo refused; fi`)
	checkNoPanic(t, r.Stderr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "refused") {
		t.Fatalf("a run emptying its own records: exit %d, stdout %q, stderr %q; want the write refused", r.Code, r.Stdout, r.Stderr)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("the store after the run: %v %v", st, err)
	}
	if got := p.lastRun(t); got.ExitCode == nil || *got.ExitCode != 0 {
		t.Fatalf("the run's record: %+v", got)
	}

	s := p.start(t, "run", "--", "sh", "-c", "sleep 1; echo done")
	time.Sleep(300 * time.Millisecond)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	r = s.wait(t)
	checkNoPanic(t, r.Stderr)
	if r.Code != exitUnrecorded || !strings.Contains(r.Stderr, "but its record could not be written: records file "+path+" is damaged (an empty file") {
		t.Fatalf("store emptied during the run: exit %d, stderr %q; want %d and the record's failure", r.Code, r.Stderr, exitUnrecorded)
	}
	if st, _ := os.Stat(path); st.Size() != 0 {
		t.Fatal("the emptied store was written afresh")
	}
	_, stderr, code := (poster{Home: home}).do(t, "runs", "list")
	if code != 1 || !strings.Contains(stderr, "is damaged (an empty file") {
		t.Fatalf("runs list after: exit %d: %s", code, stderr)
	}
}

// dnsFloodPolicy denies every name the floods look up.
const dnsFloodPolicy = `
mode  = "enforce"
ports = [80]
allow = ["allowed.test"]
`

// namesFile writes a dig batch file of n lookups: every one of the same name,
// or each of its own.
func namesFile(t *testing.T, dir string, n int, distinct bool) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		if distinct {
			fmt.Fprintf(&b, "n%d-%s.denied.test A\n", i, randHex(3))
		} else {
			b.WriteString("again.denied.test A\n")
		}
	}
	p := filepath.Join(dir, fmt.Sprintf("names-%v.txt", distinct))
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// digCommand looks up every name in file inside the wall and prints how many
// answers were NXDOMAIN.
func digCommand(file string) []string {
	return []string{"sh", "-c", "dig +tries=1 +time=2 +noall +comments -f " + file + " | grep -c 'status: NXDOMAIN'"}
}

func runEvents(t *testing.T, p poster, id string) []door.Event {
	t.Helper()
	r := p.exec(t, "runs", "events", id, "--json")
	if r.Code != 0 {
		t.Fatalf("runs events: %s", r.Stderr)
	}
	var out []door.Event
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	for {
		var ev door.Event
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// A flood of lookups of denied names grows the records by a bounded amount,
// while the run record counts every one.
func TestRecordsDNSFloodIsBounded(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig is the real client of this test (apt-get install dnsutils): %v", err)
	}
	dir := t.TempDir()
	pol := writeFile(t, "flood.hcl", dnsFloodPolicy)
	for _, tc := range []struct {
		name     string
		n        int
		distinct bool
	}{
		{"one name", 6000, false},
		{"every name its own", 6000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := measuredHome(t)
			p := poster{Home: home, Dir: dir}
			names := namesFile(t, dir, tc.n, tc.distinct)
			before := fileSize(t, filepath.Join(home, "records.db"))
			r := p.exec(t, append([]string{"run", "-q", "--policy", pol, "--"}, digCommand(names)...)...)
			if r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(tc.n) {
				t.Fatalf("flood: exit %d, %q NXDOMAIN answers of %d\n%s", r.Code, r.Stdout, tc.n, r.Stderr)
			}
			after := fileSize(t, filepath.Join(home, "records.db"))
			runs := p.runs(t)
			run := runs[len(runs)-1]
			evs := runEvents(t, p, run.ID)
			decisions := 0
			for _, ev := range evs {
				if ev.Kind == "dns" {
					decisions += 1 + ev.Repeats
				}
			}
			t.Logf("%d lookups in %s: records.db %d -> %d bytes; %d events stored, standing for %d decisions; %d dropped",
				tc.n, r.Took.Round(time.Millisecond), before, after, len(evs), decisions, run.EventsDropped)
			if run.Denied != tc.n || run.State != records.StateExited {
				t.Fatalf("run record: %d denied of %d lookups, state %s", run.Denied, tc.n, run.State)
			}
			// Every decision is in the record; the events stored stand for
			// all of them but those over the rate.
			if decisions+run.EventsDropped != tc.n || run.EventsLost != 0 {
				t.Fatalf("events stand for %d decisions, %d dropped, %d lost; want %d in all", decisions, run.EventsDropped, run.EventsLost, tc.n)
			}
			secs := int(r.Took.Seconds()) + 2
			if tc.distinct {
				if len(evs) > records.DefaultEventBurst+records.DefaultEventRate*secs || run.EventsDropped == 0 {
					t.Fatalf("%d events stored in %s, %d dropped: over the rate bound", len(evs), r.Took, run.EventsDropped)
				}
				if after-before > 4<<20 {
					t.Fatalf("records grew by %d bytes", after-before)
				}
			} else {
				if len(evs) > secs+1 {
					t.Fatalf("%d events for one name in %s, want at most one a second", len(evs), r.Took)
				}
				if after-before > 256<<10 {
					t.Fatalf("records grew by %d bytes", after-before)
				}
			}
		})
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// mountTmpfs mounts a small tmpfs for a POSTERN_HOME.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "postern-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

var notRecordedLine = regexp.MustCompile(`(?m)^postern: events of run (\S+) are not being recorded: records file (.+): no space left on device; fix: .*; (\d+) lost so far$`)

// A POSTERN_HOME that fills up during a run: the wall holds, postern says so
// at once in one line, and the run record is written with its counts right.
func TestRecordsHomeFullDuringRun(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig is the real client of this test (apt-get install dnsutils): %v", err)
	}
	home := mountTmpfs(t, "1280k")
	copyStore(t, measuredHome(t), home)
	dir := t.TempDir()
	pol := writeFile(t, "flood.hcl", dnsFloodPolicy)
	const n = 5000
	names := namesFile(t, dir, n, true)
	p := poster{Home: home, Dir: dir}
	r := p.exec(t, append([]string{"run", "-q", "--policy", pol, "--"}, digCommand(names)...)...)
	checkNoPanic(t, r.Stderr)
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(n) {
		t.Fatalf("run: exit %d, stdout %q\n%s", r.Code, r.Stdout, r.Stderr)
	}
	lines := notRecordedLine.FindAllStringSubmatch(r.Stderr, -1)
	if len(lines) != 1 || strings.Count(r.Stderr, "not being recorded") != 1 {
		t.Fatalf("stderr %q: want one line saying the events are not being recorded", r.Stderr)
	}
	id := lines[0][1]
	show := p.exec(t, "runs", "show", id, "--json")
	var run records.Run
	if err := json.Unmarshal([]byte(show.Stdout), &run); err != nil {
		t.Fatalf("runs show: %v: %s %s", err, show.Stdout, show.Stderr)
	}
	stored := len(runEvents(t, p, id))
	t.Logf("%d lookups: %d events stored, %d dropped over the rate, %d lost; stderr: %s", n, stored, run.EventsDropped, run.EventsLost, lines[0][0])
	if run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 0 || run.Denied != n ||
		run.EventsLost == 0 || stored+run.EventsDropped+run.EventsLost != n || !strings.Contains(run.EventsError, "no space left on device") {
		t.Fatalf("run record: %+v (%d events stored)", run, stored)
	}
}

// When even the final record cannot be written (here: its filesystem turned
// read-only during the run), postern says so and exits with its own failure
// status, not the run's.
func TestRecordsFinalRecordUnwritable(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	home := mountTmpfs(t, "4m")
	copyStore(t, measuredHome(t), home)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := poster{Home: home, Dir: t.TempDir()}
	cmd := p.command(ctx, "run", "--", "sh", "-c", "echo started; read x; exit 3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	// Once the command runs, its running record is durable and the records
	// file closed (each transaction opens it afresh): the filesystem goes
	// read-only then. A remount finds it busy while a file on it is open
	// for writing, which another transaction may briefly hold.
	if line, err := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "started" {
		t.Fatalf("the run did not start: %q (%v); stderr: %s", line, err, errOut.String())
	}
	if runs := p.runs(t); len(runs) == 0 || runs[len(runs)-1].State != records.StateRunning {
		t.Fatalf("the started run is not recorded as running: %+v", runs)
	}
	for try := 0; ; try++ {
		out, err := exec.Command("mount", "-o", "remount,ro", home).CombinedOutput()
		if err == nil {
			break
		}
		if try == 100 || !strings.Contains(string(out), "busy") {
			t.Fatalf("remount ro: %v: %s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stdin.Close()
	err = cmd.Wait()
	if out, rerr := exec.Command("mount", "-o", "remount,rw", home).CombinedOutput(); rerr != nil {
		t.Fatalf("remount rw: %v: %s", rerr, out)
	}
	checkNoPanic(t, errOut.String())
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUnrecorded {
		t.Fatalf("postern: %v, want exit %d\nstderr: %s", err, exitUnrecorded, errOut.String())
	}
	want := "ended with exit status 3 (0 allowed, 0 denied) but its record could not be written: records file " + filepath.Join(home, "records.db")
	if !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "read-only file system") {
		t.Fatalf("stderr %q: want %q and the reason", errOut.String(), want)
	}
	// Writable again, the records show the run as it is: not finished.
	if runs := p.runs(t); runs[len(runs)-1].State != records.StateLost {
		t.Fatalf("the unrecorded run is %s in the records, want lost", runs[len(runs)-1].State)
	}
}

func copyStore(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(from, "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, "records.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
