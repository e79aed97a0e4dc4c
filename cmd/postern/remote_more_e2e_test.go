package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/records"
)

// ptyProc is postern started on a pseudo-terminal of the test's own, as a person
// at a terminal would start it.
type ptyProc struct {
	master *os.File
	cmd    *exec.Cmd
	waited chan struct{}
	err    error

	mu   sync.Mutex
	out  bytes.Buffer
	read chan struct{} // closed when the master reads EIO
}

// startOnPTY runs the built postern as c with args on a new terminal of rows x cols.
func (c *controller) startOnPTY(t *testing.T, rows, cols uint16, args ...string) *ptyProc {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	p := &ptyProc{master: master, waited: make(chan struct{}), read: make(chan struct{})}
	p.cmd = exec.Command(posternBin, args...)
	p.cmd.Env = append(c.env(), "TERM=xterm-remote-test")
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		slave.Close()
		t.Fatal(err)
	}
	slave.Close()
	t.Cleanup(func() {
		select {
		case <-p.waited:
		default:
			p.cmd.Process.Kill()
			<-p.waited
		}
	})
	go func() {
		defer close(p.read)
		b := make([]byte, 4096)
		for {
			k, err := master.Read(b)
			p.mu.Lock()
			p.out.Write(b[:k])
			p.mu.Unlock()
			if err != nil {
				return // EIO once no one holds the slave
			}
		}
	}()
	go func() { p.err = p.cmd.Wait(); close(p.waited) }()
	return p
}

func (p *ptyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until the terminal shows re, or fails the test.
func (p *ptyProc) waitFor(t *testing.T, d time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.waited:
			// One last look: the output may have arrived with the end.
			<-p.read
			if m := re.FindStringSubmatch(p.output()); m != nil {
				return m
			}
			t.Fatalf("postern ended (%v) before the terminal showed %q:\n%s", p.err, re, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %s:\n%s", re, d, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exit waits for postern to end and returns its status.
func (p *ptyProc) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.waited:
	case <-time.After(d):
		t.Fatalf("postern did not end within %s:\n%s", d, p.output())
	}
	select {
	case <-p.read:
	case <-time.After(5 * time.Second):
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("postern on a terminal: %v", p.err)
	}
	return 0
}

// TestRemoteTerminal runs a remote command from a terminal: it sees a terminal
// of the person's size and TERM, a resize reaches it, and Ctrl-C typed here
// interrupts it there, with the status saying so.
func TestRemoteTerminal(t *testing.T) {
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	script := `tty; echo "TERM=$TERM"; echo "SIZE $(stty size)"; echo READY
while [ "$(stty size)" = "33 101" ]; do sleep 0.05; done
echo "RESIZED $(stty size)"; sleep 100; echo "NOT INTERRUPTED"`
	p := r.C.startOnPTY(t, 33, 101, "run", "--machine", "far", "--", "sh", "-c", script)
	p.waitFor(t, 30*time.Second, regexp.MustCompile(`READY`))
	out := p.output()
	if !regexp.MustCompile(`/dev/pts/\d+`).MatchString(out) || !strings.Contains(out, "SIZE 33 101") || !strings.Contains(out, "TERM=xterm-remote-test") {
		t.Fatalf("the remote run did not see a terminal of 33x101 with the person's TERM:\n%s", out)
	}
	// The person's window grows: the kernel tells postern, postern tells the agent.
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 120}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, 10*time.Second, regexp.MustCompile(`RESIZED 41 120`))
	// Give sleep a moment to start, then type Ctrl-C.
	time.Sleep(200 * time.Millisecond)
	typed := time.Now()
	if _, err := p.master.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	code := p.exit(t, 10*time.Second)
	t.Logf("Ctrl-C ended the remote run in %s", time.Since(typed).Round(time.Millisecond))
	if code != 130 || strings.Contains(p.output(), "NOT INTERRUPTED") {
		t.Fatalf("after Ctrl-C postern exited %d, want 130 (interrupted):\n%s", code, p.output())
	}
	run := lastRun(t, r.C)
	if run.State != records.StateExited || run.ExitCode == nil || *run.ExitCode != 130 || run.Why != "ended by signal interrupt" {
		t.Fatalf("run record after Ctrl-C: %+v", run)
	}
}
