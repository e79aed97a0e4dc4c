package sshclient

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyConn is an ssh connection carried over a ProxyCommand's standard input
// and output, as OpenSSH does it: the command line, its tokens expanded, is run
// by the user's shell with exec, and what it reads and writes is the ssh
// stream. Closing the connection closes the command's input and hangs it up.
type proxyConn struct {
	command string
	cmd     *exec.Cmd
	r       *os.File // the command's stdout
	w       *os.File // the command's stdin
	stderr  *tailBuffer
	remote  proxyAddr
	waited  chan struct{}
	waitErr error
	once    sync.Once
}

// dialProxyCommand starts command (tokens already expanded) for addr.
func dialProxyCommand(command, addr string) (*proxyConn, error) {
	shell := os.Getenv("SHELL")
	if shell == "" {
		shell = "/bin/sh"
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	pc := &proxyConn{command: command, r: outR, w: inW, stderr: &tailBuffer{max: 2048},
		remote: proxyAddr(addr), waited: make(chan struct{})}
	cmd := exec.Command(shell, "-c", "exec "+command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, pc.stderr
	// Its own process group: a Ctrl-C meant for postern's run is not its.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		inW.Close()
		return nil, fmt.Errorf("ProxyCommand %q: %w", command, err)
	}
	pc.cmd = cmd
	go func() {
		pc.waitErr = cmd.Wait()
		close(pc.waited)
	}()
	return pc, nil
}

func (c *proxyConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *proxyConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close ends the command: its input closes, then it is hung up, and killed
// if it is still there a second later.
func (c *proxyConn) Close() error {
	c.once.Do(func() {
		c.w.Close()
		c.r.Close()
		_ = c.cmd.Process.Signal(syscall.SIGHUP)
		select {
		case <-c.waited:
		case <-time.After(time.Second):
			_ = c.cmd.Process.Kill()
			<-c.waited
		}
	})
	return nil
}

// failure describes why the connection through the command failed, with the
// status the command exited with (unless it was hung up by Close) and what it
// said on stderr.
func (c *proxyConn) failure(err error) error {
	c.Close()
	var ee *exec.ExitError
	if errors.As(c.waitErr, &ee) && ee.ExitCode() >= 0 {
		err = fmt.Errorf("%w (the command ended: %v)", err, c.waitErr)
	}
	if said := strings.TrimSpace(c.stderr.String()); said != "" {
		err = fmt.Errorf("%w; it said: %s", err, said)
	}
	return fmt.Errorf("through ProxyCommand %q: %w", c.command, err)
}

func (c *proxyConn) LocalAddr() net.Addr  { return proxyAddr("proxy-command") }
func (c *proxyConn) RemoteAddr() net.Addr { return c.remote }

func (c *proxyConn) SetDeadline(t time.Time) error {
	return errors.Join(c.r.SetReadDeadline(t), c.w.SetWriteDeadline(t))
}
func (c *proxyConn) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *proxyConn) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

// proxyAddr names an end of a ProxyCommand connection.
type proxyAddr string

func (a proxyAddr) Network() string { return "proxy-command" }
func (a proxyAddr) String() string  { return string(a) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
