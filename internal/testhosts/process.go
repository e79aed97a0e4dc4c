//go:build linux

package testhosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrMissingTool means a program a server or fixture runs is not installed.
// The error's text names the Debian package that provides it.
var ErrMissingTool = errors.New("missing tool")

// lookTool finds name on PATH or says which package to install.
func lookTool(name, pkg string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found on PATH (apt-get install %s)", ErrMissingTool, name, pkg)
	}
	return p, nil
}

// process is a server program a host runs in its namespace, in a process
// group of its own, with its output in a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when Wait returned
	err  error         // Wait's result, once done is closed
}

// startProcess starts argv inside h's namespace with output to dir/<name>.log.
// The process dies with the test process (PDEATHSIG) if nobody stops it.
func (h *Host) startProcess(dir, name string, env []string, argv ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", name, h.Name, err)
	}
	defer logf.Close()
	// Not CommandContext: the server lives until Close, not until a start-up
	// deadline.
	cmd := h.Command(context.Background(), argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startFromSpawner(cmd); err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", name, h.Name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// The kernel sends PDEATHSIG when the *thread* that forked a child ends, not
// the process. Go ends an OS thread whenever a goroutine locked to it returns
// (onFreshThread does so on every namespace switch), so a child forked from an
// arbitrary thread could be killed at random. Children are therefore forked
// from one thread that is locked for the life of the process and never ends:
// the spawner. It is the one goroutine here without an owner that stops it,
// because it must outlive every child it starts.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func startFromSpawner(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// stop sends SIGTERM to the process's group, waits up to grace for the
// process, then kills the group, and always waits for the process. Then it
// waits for the rest of the group (a server's workers or preforked children,
// reaped by whoever inherits them) to be gone too.
func (p *process) stop(grace time.Duration) error {
	// The group is the one this process leads, made by Setpgid at start. Its
	// id cannot name another group while a member lives (the kernel does not
	// reuse the pid of a live group), and stop is called once per process.
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
	deadline := time.Now().Add(grace)
	for {
		left := liveInGroup(pgid)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stop %s: processes %v of group %d remain %v after SIGKILL", p.name, left, pgid, grace)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// liveInGroup lists the processes of group pgid that have not ended. Zombies
// have: their parent (init, once the group's leader is gone) reaps them when
// it gets to it, and they hold nothing meanwhile.
func liveInGroup(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			live = append(live, pid)
		}
	}
	return live
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last lines of the process's log for an error message.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// waitAccepting dials addr from the root namespace until it accepts, the
// process ends, or ctx is done.
func (h *Host) waitAccepting(ctx context.Context, p *process, addr netip.AddrPort) error {
	for {
		// From inside the host: a link's address is reachable only there.
		c, err := h.Dial(ctx, addr.String())
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before accepting on %s (%v); its log says: %s", p.name, addr, p.err, p.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not accepting on %s: %w; its log says: %s", p.name, addr, ctx.Err(), p.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitPath waits until path exists, the process ends, or ctx is done.
func waitPath(ctx context.Context, p *process, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before making %s (%v); its log says: %s", p.name, path, p.err, p.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not make %s: %w; its log says: %s", p.name, path, ctx.Err(), p.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort asks the kernel for a free TCP port on the host's address for a
// server program to bind by number. Only this lab's servers bind in a host's
// namespace; should one of them take the port first, the program fails with
// "address in use" and its starter tries another port.
func (h *Host) freePort(ctx context.Context) (int, error) {
	ln, err := h.Listen(ctx, 0)
	if err != nil {
		return 0, err
	}
	port := addrPortOf(ln.Addr()).Port()
	ln.Close()
	return int(port), nil
}

// serverDir makes a private directory for one server's configuration, logs
// and temporary files under the lab's directory.
func (h *Host) serverDir(kind string) (string, error) {
	dir, err := os.MkdirTemp(h.lab.dir, h.Name+"-"+kind+"-")
	if err != nil {
		return "", fmt.Errorf("%s on %s: %w", kind, h.Name, err)
	}
	return dir, nil
}

func addrPortFrom(a netip.Addr, port int) netip.AddrPort {
	return netip.AddrPortFrom(a, uint16(port))
}
