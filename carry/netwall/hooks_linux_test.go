package netwall

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// nsInode is the inode of the namespace bound at path.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestHoldHooks(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatal("nsenter (util-linux) is what enters the held namespace here:", err)
	}
	path := filepath.Join(t.TempDir(), "hooks")
	t.Cleanup(func() { _, _ = releaseHooksAt(path) })

	// This process's own namespace, which /proc shows as its main
	// thread's, stays what it was.
	before, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if after, err := os.Readlink("/proc/self/ns/net"); err != nil || after != before {
			t.Errorf("this process's network namespace was %s, is %s (%v)", before, after, err)
		}
	}()

	// Made once, by whichever of several postern processes comes first.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = holdHooksAt(path) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
	}
	if !hooksHeldAt(path) {
		t.Fatalf("%s holds no network namespace", path)
	}
	ino := nsInode(t, path)
	if err := holdHooksAt(path); err != nil || nsInode(t, path) != ino {
		t.Fatalf("holding again: %v; the namespace changed (%d, was %d)", err, nsInode(t, path), ino)
	}

	// nft, in the held namespace, lists the wall's table; and the
	// namespace has nothing but lo, down.
	out, err := exec.Command("nsenter", "--net="+path, "nft", "list", "table", "inet", tableName).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list in the held namespace: %v\n%s", err, out)
	}
	for _, want := range []string{"type nat hook output", "type filter hook output", "redirect to"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the held table lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command("nsenter", "--net="+path, "ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link in the held namespace: %v\n%s", err, out)
	}
	if links := strings.Split(strings.TrimSpace(string(out)), "\n"); len(links) != 1 || !strings.Contains(links[0], "lo:") || strings.Contains(links[0], "UP") {
		t.Errorf("the held namespace has links %q, want only lo, down", links)
	}

	// From inside a run, the machine's holder is out of reach: /run is the
	// run's own.
	r := runSpec(t, Spec{Command: []string{"sh", "-c", "test -e " + HooksHolder + " && echo REACHED; nsenter --net=" + HooksHolder + " true 2>/dev/null && echo ENTERED; true"}}, nil)
	if strings.Contains(r.stdout, "REACHED") || strings.Contains(r.stdout, "ENTERED") {
		t.Errorf("inside the run: %q", r.stdout)
	}
	// The run, raised as root, keeps the machine's holder.
	if !HooksHeld() {
		t.Errorf("after a run as root, %s holds no namespace", HooksHolder)
	}

	was, err := releaseHooksAt(path)
	if err != nil || !was || hooksHeldAt(path) {
		t.Fatalf("release: held before %v, err %v, held after %v", was, err, hooksHeldAt(path))
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the release: %v", path, err)
	}
	if was, err := releaseHooksAt(path); was || err != nil {
		t.Errorf("a second release found one (%v) or failed (%v)", was, err)
	}
}
