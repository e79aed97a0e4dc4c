package door

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/policy"
)

// logBuffer is a slog destination tests can read while the door writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// failingListener fails Accept with each of errs in turn, then accepts from
// the real listener.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	calls int
	// forever repeats the last error instead of moving on.
	forever bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls++
	if len(l.errs) > 0 {
		err := l.errs[0]
		if len(l.errs) > 1 || !l.forever {
			l.errs = l.errs[1:]
		}
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// doorRun is a door running on one listener until the test ends.
type doorRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned err
	err    error
}

func runDoor(t *testing.T, l net.Listener, logs io.Writer) *doorRun {
	t.Helper()
	d, err := New(Config{Policy: mustPolicy(t, testPolicy), Logger: slog.New(slog.NewTextHandler(logs, nil)), DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &doorRun{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = d.Run(ctx, Listeners{Proxy: l}); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			t.Error("door did not stop")
		}
	})
	return r
}

func TestAcceptRidesOutDescriptorExhaustion(t *testing.T) {
	checkNoLeaks(t)
	errs := []error{acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED), acceptErr(syscall.EMFILE)}
	fl := &failingListener{Listener: listen(t), errs: errs}
	var logs logBuffer
	start := time.Now()
	run := runDoor(t, fl, &logs)

	// The door is still serving: a CONNECT gets judged and answered.
	_, head, _ := connectVia(t, fl.Addr().String(), "bad.a.test:443")
	if !strings.HasPrefix(head, "HTTP/1.1 403") {
		t.Fatalf("after failed accepts the door answered %q, want a 403", head)
	}
	// It backed off 5, 10, 20 and 40 ms before that.
	if took := time.Since(start); took < 75*time.Millisecond {
		t.Errorf("four failed accepts were retried within %v, want a backoff of at least 75ms", took)
	}
	select {
	case <-run.done:
		t.Fatalf("Run returned %v after accept errors that pass", run.err)
	default:
	}
	out := logs.String()
	if n := strings.Count(out, "door accept failed, retrying"); n != len(errs) {
		t.Fatalf("%d accept warnings logged, want %d:\n%s", n, len(errs), out)
	}
	for _, want := range []string{"too many open files", "retry_in=5ms", "retry_in=10ms", "retry_in=20ms", "retry_in=40ms", "listener=proxy"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestAcceptBackoffIsCappedAndStopsPromptly(t *testing.T) {
	fl := &failingListener{Listener: listen(t), forever: true,
		errs: []error{acceptErr(syscall.EMFILE)}}
	var logs logBuffer
	run := runDoor(t, fl, &logs)
	// 5+10+...+640 ms is about 1.3 s; by 2.5 s the delay has reached its 1 s cap.
	time.Sleep(2500 * time.Millisecond)
	out := logs.String()
	if !strings.Contains(out, "retry_in=1s") {
		t.Errorf("backoff never reached 1s:\n%s", out)
	}
	if strings.Contains(out, "retry_in=2s") || strings.Contains(out, "retry_in=1.28s") {
		t.Errorf("backoff went past 1s:\n%s", out)
	}
	fl.mu.Lock()
	calls := fl.calls
	fl.mu.Unlock()
	if calls < 6 || calls > 12 {
		t.Errorf("%d accepts in 2.5s of backoff, want about 9", calls)
	}
	stopAt := time.Now()
	run.cancel()
	select {
	case <-run.done:
		if run.err != nil {
			t.Fatalf("Run after cancel during backoff: %v", run.err)
		}
		if took := time.Since(stopAt); took > 500*time.Millisecond {
			t.Fatalf("Run took %v to stop while backing off", took)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return while backing off")
	}
}

func TestAcceptErrorThatDoesNotPassStopsTheDoor(t *testing.T) {
	broke := errors.New("listener broke")
	fl := &failingListener{Listener: listen(t), errs: []error{broke}}
	run := runDoor(t, fl, io.Discard)
	select {
	case <-run.done:
		if !errors.Is(run.err, broke) || !strings.Contains(run.err.Error(), "accept on proxy listener") {
			t.Fatalf("Run returned %v, want the accept error", run.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return after a fatal accept error")
	}
}

func TestAcceptErrorPasses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{acceptErr(syscall.EMFILE), true},
		{acceptErr(syscall.ENFILE), true},
		{acceptErr(syscall.ECONNABORTED), true},
		{acceptErr(syscall.ENOBUFS), true},
		{os.ErrDeadlineExceeded, true},
		{net.ErrClosed, false},
		{&net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}, false},
		{acceptErr(syscall.EBADF), false},
		{acceptErr(syscall.EINVAL), false},
		{errors.New("other"), false},
	} {
		if got := acceptErrorPasses(tc.err); got != tc.want {
			t.Errorf("acceptErrorPasses(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The real kernel: a door in a child process with a low descriptor limit is
// filled with idle connections until accept fails with EMFILE; once they
// close, it serves again.
const lowFDChildEnv = "POSTERN_DOOR_TEST_LOW_FD_CHILD"

func TestAcceptUnderRealDescriptorLimit(t *testing.T) {
	if os.Getenv(lowFDChildEnv) != "" {
		lowFDChild()
		return
	}
	// A child process under a real descriptor limit: not the pure tier.
	if testing.Short() {
		t.Skip("kernel tier: skipped under -short")
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc to count descriptors")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptUnderRealDescriptorLimit$")
	cmd.Env = append(os.Environ(), lowFDChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close() // the child stops its door when stdin closes
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child door gave no address: %v\n%s", err, stderr.String())
	}
	addr := strings.TrimSpace(line)

	// Hold idle connections until the door has run out of descriptors.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "too many open files") {
		if time.Now().After(deadline) {
			t.Fatalf("door never ran out of descriptors with %d connections held:\n%s", len(held), stderr.String())
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case err := <-exited:
		t.Fatalf("door exited on EMFILE: %v\n%s", err, stderr.String())
	default:
	}
	for _, c := range held {
		c.Close()
	}
	held = nil

	// With descriptors free again, a new client is served.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT bad.a.test:443 HTTP/1.1\r\nHost: bad.a.test:443\r\n\r\n")
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Fatalf("after EMFILE passed the door answered %q (%v)\n%s", status, err, stderr.String())
	}
}

// lowFDChild runs a door with RLIMIT_NOFILE at 32, prints its address, and
// serves until stdin closes.
func lowFDChild() {
	lim := syscall.Rlimit{Cur: 32, Max: 32}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(2)
	}
	pol, err := policy.Parse("test.hcl", []byte(testPolicy))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	d, err := New(Config{Policy: pol, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), DrainTimeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(l.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	if err := d.Run(ctx, Listeners{Proxy: l}); err != nil {
		fmt.Fprintln(os.Stderr, "door run:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
