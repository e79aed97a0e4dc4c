package netwall

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOwnDev: the run's /dev holds null, zero, full, random, urandom, tty,
// the standard links, ptmx and its own pts and shm, and nothing else of the
// host's /dev; the run can neither add a node to it nor make one elsewhere
// that opens the host's disk.
func TestOwnDev(t *testing.T) {
	requireRoot(t)
	// Every host device node (and socket, and link) but the allowed ones must
	// be absent inside.
	allowed := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx",
		"/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/pts", "/dev/shm"}
	var hostOnly []string
	var disk string
	filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "/dev" {
			return nil
		}
		if p == "/dev/pts" || p == "/dev/shm" {
			return fs.SkipDir
		}
		if !slices.Contains(allowed, p) {
			hostOnly = append(hostOnly, p)
		}
		if d.Type()&fs.ModeDevice != 0 && d.Type()&fs.ModeCharDevice == 0 && (disk == "" || strings.HasPrefix(disk, "/dev/loop")) {
			disk = p // a block device, a disk rather than a loop device if there is one
		}
		return nil
	})
	if len(hostOnly) == 0 {
		t.Fatal("the host's /dev holds nothing but the allowed nodes: nothing to prove absent")
	}
	var script strings.Builder
	script.WriteString(`echo "list: $(ls -A /dev | tr '\n' ' ')"; `)
	script.WriteString(`for f in` + " " + strings.Join(hostOnly, " ") + `; do if [ -e "$f" ] || [ -L "$f" ]; then echo "PRESENT $f"; fi; done; `)
	script.WriteString(`touch /dev/planted 2>/dev/null && echo PLANTED; ` +
		`mkdir /dev/d 2>/dev/null && echo MKDIR; ` +
		`mknod /dev/mem2 c 1 1 2>/dev/null && echo MKNOD-DEV; ` +
		`echo into-null > /dev/null && echo null-ok; ` +
		`head -c 8 /dev/zero | od -An -tx1 | tr -d ' \n'; echo; ` +
		`head -c 8 /dev/urandom | wc -c; ` +
		`echo via-stdout >> /dev/stdout; `)
	if disk != "" {
		// A node of the host's disk made where the run may write, then opened.
		var st unix.Stat_t
		if err := unix.Stat(disk, &st); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, `if mknod /tmp/disk b %d %d 2>/dev/null; then echo MKNOD-TMP; head -c 1 /tmp/disk >/dev/null 2>&1 && echo OPENED-DISK; fi; `, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		t.Logf("host disk %s: %d:%d", disk, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	r := runWalled(t, nil, "sh", "-c", script.String())
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if want := "list: fd full null ptmx pts random shm stderr stdin stdout tty urandom zero "; !strings.Contains(r.stdout, want) {
		t.Errorf("the run's /dev: want %q in\n%s", want, r.stdout)
	}
	for _, bad := range []string{"PRESENT", "PLANTED", "MKDIR", "MKNOD-DEV", "OPENED-DISK"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("%s inside the wall:\n%s", bad, r.stdout)
		}
	}
	for _, want := range []string{"null-ok", "\n0000000000000000\n8\nvia-stdout"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in\n%s", want, r.stdout)
		}
	}
}
