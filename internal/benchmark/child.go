//go:build linux

package benchmark

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// childEnv turns the benchmark binary into the upstream echo server for idle
// tunnels, run in a test host. It is a separate process so that the tunnels'
// upstream ends do not count against the benchmark's own open-file limit.
const childEnv = "POSTERN_BENCH_ECHO_LISTEN"

// ChildRequested reports whether this process was started as the echo child.
// A main that uses Run must check it first and call ServeChild.
func ChildRequested() bool { return os.Getenv(childEnv) != "" }

// ServeChild listens on the address in the environment, prints "ready" on
// stdout, and echoes on every connection until stdin closes or ctx ends.
func ServeChild(ctx context.Context) error {
	if _, err := raiseFileLimit(1 << 17); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", os.Getenv(childEnv))
	if err != nil {
		return fmt.Errorf("echo child: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			buf := make([]byte, 512)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	return nil
}

// echoChild is a running echo child.
type echoChild struct {
	cmd   *exec.Cmd
	stdin io.Closer
	once  sync.Once
}

// startEchoChild runs this binary as the echo child inside h on port.
func startEchoChild(ctx context.Context, h *testhosts.Host, port int) (*echoChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := h.Command(ctx, self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d", childEnv, h.Addr, port))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start echo child: %w", err)
	}
	e := &echoChild{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		e.Close()
		return nil, fmt.Errorf("echo child did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return e, nil
}

// Close ends the child: stdin EOF, then SIGKILL after 5s; always waited on.
func (e *echoChild) Close() error {
	e.once.Do(func() {
		e.stdin.Close()
		done := make(chan struct{})
		go func() { e.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			e.cmd.Process.Kill()
			<-done
		}
	})
	return nil
}
