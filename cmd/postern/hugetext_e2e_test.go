//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/hugetext"
	"github.com/postern-dev/postern/internal/testhosts"
)

// Measuring the machine leaves postern's code, and the wall's init it keeps,
// in the page cache as huge pages, where the kernel gives a file such pages at all (as a direct
// priming of a copy shows): the next run's controller maps it so, having
// started from a cache that held it in small pages. The probe's output and
// exit status are as they were, though its process ended as the primer.
func TestProbeHoldsPosternsCodeInHugePages(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "postern")
	// A copy of its own, which no other test maps; written by cp, so that
	// no descriptor of this process for writing it outlives the copy.
	for _, to := range []string{bin, bin + "-direct"} {
		if out, err := exec.Command("cp", binFor(t), to).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	}
	direct, err := hugetext.PrimeFile(bin + "-direct")
	if err != nil {
		t.Fatalf("prime a copy directly: %v", err)
	}
	t.Logf("a copy primed directly: %d MiB in huge pages (possible: %v)", direct>>20, hugetext.Possible())
	uncache(t, bin)

	// The kept Go init's pages are the runs' that start it: where postern
	// sets walls up itself, a run never reads the file, and the measure
	// here (a populating read) would be its first reader.
	p := poster{Home: t.TempDir(), Dir: t.TempDir(), Bin: bin, Env: []string{"POSTERN_WALL_INIT=go"}}
	before := controllerHuge(t, p, false, "run", "--egress-open", "a baseline: the page cache as a start leaves it", "--", "sleep", "5")
	if before != 0 {
		t.Fatalf("a start from a cold cache left %d kB in huge pages: nothing to prove", before>>10)
	}
	probe := p.exec(t, "machine", "probe-confinement", "--json")
	var rec struct {
		Carry string `json:"carry"`
	}
	if probe.Code != 0 || json.Unmarshal([]byte(probe.Stdout), &rec) != nil || rec.Carry != "network-wall" {
		t.Fatalf("probe: exit %d, carry %q\n%s\n%s", probe.Code, rec.Carry, probe.Stdout, probe.Stderr)
	}
	after := controllerHuge(t, p, direct > 0, "run", "--", "sleep", "5")
	t.Logf("a run's controller after the probe: %d MiB of postern in huge pages", after>>20)
	if direct > 0 && after == 0 {
		t.Fatal("the probe left postern's code in small pages, where a direct priming holds it in huge ones")
	}
	if direct == 0 && after != 0 {
		t.Fatalf("huge pages where a direct priming had none: %d", after)
	}
	// The wall's init, kept by the probe's walls, primed beside postern:
	// its page cache holds huge pages an aligned mapping gets whole.
	kept, _ := filepath.Glob(filepath.Join(p.Home, "lib", "wall-init-*"))
	if len(kept) != 1 {
		t.Fatalf("kept inits after the probe: %v", kept)
	}
	if init, err := hugetext.CachedHuge(kept[0]); err != nil || (direct > 0) != (init > 0) {
		t.Fatalf("the kept init after the probe: %d kB in huge pages (%v), a direct priming of postern %d kB", init>>10, err, direct>>10)
	}

	// Dropped from the cache again (memory ran short, a reboot): a short
	// run leaves it as it finds it; one that lasts primes it on its way
	// out, its output and status untouched.
	uncache(t, bin)
	uncache(t, kept[0])
	if r := p.exec(t, "run", "--", "true"); r.Code != 0 {
		t.Fatalf("short run: exit %d\n%s", r.Code, r.Stderr)
	}
	if init, err := hugetext.CachedHuge(kept[0]); err != nil || init != 0 {
		t.Fatalf("a short run primed the kept init (%d kB in huge pages, %v)", init>>10, err)
	}
	if got := controllerHuge(t, p, false, "run", "--", "sleep", "5"); got != 0 {
		t.Fatalf("a short run primed postern's code (%d kB in huge pages)", got>>10)
	}
	uncache(t, bin)
	uncache(t, kept[0])
	long := p.exec(t, "run", "--", "sh", "-c", "sleep 1.2; echo lasted; exit 3")
	if long.Code != 3 || long.Stdout != "lasted\n" {
		t.Fatalf("long run: exit %d, stdout %q\n%s", long.Code, long.Stdout, long.Stderr)
	}
	again := controllerHuge(t, p, direct > 0, "run", "--", "sleep", "5")
	if (direct > 0) != (again > 0) {
		t.Fatalf("after a run that lasted: %d kB in huge pages, a direct priming %d kB", again>>10, direct>>10)
	}
	if init, err := hugetext.CachedHuge(kept[0]); err != nil || (direct > 0) != (init > 0) {
		t.Fatalf("the kept init after a run that lasted: %d kB in huge pages (%v), a direct priming of postern %d kB", init>>10, err, direct>>10)
	}
}

// uncache writes the file out and drops it from the page cache, then has it
// read as an ordinary start reads it.
func uncache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// controllerHuge starts postern with args and returns how much of its
// mappings its controller holds in huge pages once it has started: read
// once, half a second in, or, with wait, as soon as there are any (at most
// three seconds in).
func controllerHuge(t *testing.T, p poster, wait bool, args ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := p.command(ctx, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	pid := strconv.Itoa(cmd.Process.Pid)
	if !wait {
		time.Sleep(500 * time.Millisecond)
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held, err := hugetext.HeldBy(pid)
		if err != nil {
			t.Fatalf("the controller: %v", err)
		}
		if !wait || held > 0 || time.Now().After(deadline) {
			return held
		}
	}
}
