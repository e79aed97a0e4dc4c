package container

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door"
)

// outFile is a pipe whose read side is collected until the write side closes.
type outFile struct {
	w    *os.File
	done chan string
}

func newOut(t *testing.T) *outFile {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o := &outFile{w: w, done: make(chan string, 1)}
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		r.Close()
		o.done <- b.String()
	}()
	t.Cleanup(func() { w.Close() })
	return o
}

// text closes the write side and returns everything written.
func (o *outFile) text(t *testing.T) string {
	t.Helper()
	o.w.Close()
	select {
	case s := <-o.done:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("output did not end")
		return ""
	}
}

func raise(t *testing.T, spec Spec) *Wall {
	t.Helper()
	if spec.Self == "" {
		spec.Self = harnessBin
	}
	if spec.Run == "" {
		spec.Run = fmt.Sprintf("test-%d", time.Now().UnixNano())
	}
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	w, err := Raise(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raised %s in %d ms", w.Name(), time.Since(t0).Milliseconds())
	t.Cleanup(func() { w.Close() })
	return w
}

// tWriter logs each write to t.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitCode(t *testing.T, w *Wall) int {
	t.Helper()
	type res struct {
		code int
		err  error
	}
	c := make(chan res, 1)
	go func() {
		code, err := w.Wait()
		c <- res{code, err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("wait: %v", r.err)
		}
		return r.code
	case <-time.After(time.Minute):
		t.Fatal("the container's command did not end within a minute")
		return 0
	}
}

func assertGone(t *testing.T, e *Engine, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := e.output(ctx, "ps", "--all", "--format", "{{.Names}}", "--filter", "name=^"+name+"$")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("container %s still exists: %q", name, out)
	}
}

// serveTransparent answers each connection on l with its original destination
// followed by what the client sent on its first line.
func serveTransparent(l net.Listener, seen chan<- netip.AddrPort) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			dst, err := door.OriginalDst(c.(*net.TCPConn))
			if err != nil {
				fmt.Fprintf(c, "error %v\n", err)
				return
			}
			seen <- dst
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "door saw %s %s\n", dst, strings.TrimSpace(line))
		}()
	}
}

func TestWalledRoundTripExitStatusAndRemoval(t *testing.T) {
	e := requirePodman(t)
	img := busyboxImage(t, e)
	out, errOut := newOut(t), newOut(t)
	w := raise(t, Spec{Engine: e, Image: img, Ports: []uint16{443},
		Command: []string{"sh", "-c", `echo hello | nc 192.0.2.1 443; echo hello6 | nc 2001:db8::1 443; ` +
			`if echo x | nc -w 2 192.0.2.1 8080; then echo port-8080-open; fi; echo err >&2; exit 7`},
		Stdout: out.w, Stderr: errOut.w})
	seen := make(chan netip.AddrPort, 4)
	go serveTransparent(w.Listeners().Transparent, seen)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if code := waitCode(t, w); code != 7 {
		t.Errorf("exit status %d, want 7", code)
	}
	w.Close()
	stdout, stderr := out.text(t), errOut.text(t)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	for _, want := range []string{"door saw 192.0.2.1:443 hello", "door saw [2001:db8::1]:443 hello6"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout %q lacks %q", stdout, want)
		}
	}
	if strings.Contains(stdout, "port-8080-open") {
		t.Errorf("a port outside the policy connected: %q", stdout)
	}
	if !strings.Contains(stderr, "err") {
		t.Errorf("stderr %q lacks the command's own", stderr)
	}
	close(seen)
	var dsts []string
	for d := range seen {
		dsts = append(dsts, d.String())
	}
	if len(dsts) != 2 {
		t.Errorf("the door saw %v, want exactly the two connections to port 443", dsts)
	}
	assertGone(t, e, w.Name())
}
