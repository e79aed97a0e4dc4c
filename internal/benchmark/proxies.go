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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyProc is one proxy under test, running as its own process tree.
type proxyProc struct {
	Name string
	Addr string // 127.0.0.1:port

	cmd  *exec.Cmd
	wg   sync.WaitGroup
	mu   sync.Mutex
	tail []string // last lines of its output, for errors
	once sync.Once
}

// start runs cmd, drains its stdout and stderr (a proxy blocked on a full
// pipe would measure the pipe), and waits until addr accepts or the
// listening line appears (when addrRE is set, it yields the address).
func startProxy(ctx context.Context, name string, cmd *exec.Cmd, addr string, addrRE *regexp.Regexp) (*proxyProc, error) {
	p := &proxyProc{Name: name, Addr: addr, cmd: cmd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	found := make(chan string, 1)
	drain := func(r io.Reader) {
		defer p.wg.Done()
		// Only the first lines are looked at: a door logs a line per
		// decision, and the benchmark must not spend its CPU reading them.
		br := bufio.NewReaderSize(r, 64<<10)
		for seen := 0; seen < 40; seen++ {
			line, err := br.ReadString('\n')
			line = strings.TrimRight(line, "\r\n")
			if addrRE != nil {
				if m := addrRE.FindStringSubmatch(line); m != nil {
					select {
					case found <- strings.Trim(m[1], `"`):
					default:
					}
				}
			}
			if line != "" {
				p.mu.Lock()
				p.tail = append(p.tail, line)
				p.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, br)
	}
	p.wg.Add(2)
	go drain(stdout)
	go drain(stderr)
	exited := make(chan struct{})
	go func() { p.wg.Wait(); close(exited) }()

	deadline := time.Now().Add(15 * time.Second)
	for {
		if addrRE != nil && p.Addr == "" {
			select {
			case a := <-found:
				p.Addr = a
			default:
			}
		}
		if p.Addr != "" {
			if c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond); err == nil {
				c.Close()
				return p, nil
			}
		}
		select {
		case <-exited:
			p.Close()
			return nil, fmt.Errorf("%s exited before listening: %s", name, p.output())
		case <-ctx.Done():
			p.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Close()
			return nil, fmt.Errorf("%s did not listen within 15s: %s", name, p.output())
		}
	}
}

func (p *proxyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// Close stops the proxy's process group: SIGTERM, then SIGKILL after 5s.
func (p *proxyProc) Close() error {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		p.wg.Wait()
	})
	return nil
}

// FDs counts the open descriptors of the proxy's process tree.
func (p *proxyProc) FDs() int {
	n := 0
	for _, pid := range p.tree() {
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			n += len(ents)
		}
	}
	return n
}

// RSS is the resident memory of the proxy's whole process tree, in bytes.
func (p *proxyProc) RSS() (int64, error) {
	pids := p.tree()
	var total int64
	for _, pid := range pids {
		kb, err := statusKB(pid, "VmRSS:")
		if err != nil {
			if pid == p.cmd.Process.Pid {
				return 0, err
			}
			continue
		}
		total += kb << 10
	}
	return total, nil
}

// tree lists the proxy's pid and all its descendants.
func (p *proxyProc) tree() []int {
	pids := []int{p.cmd.Process.Pid}
	children := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return pids
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	for i := 0; i < len(pids); i++ {
		pids = append(pids, children[pids[i]]...)
	}
	return pids
}

func statusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no " + field + " in /proc/" + strconv.Itoa(pid) + "/status")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

var doorListening = regexp.MustCompile(`door listening.* addr=(\S+)`)

// startDoor runs the built postern binary as `postern door`, admitting exactly
// the lab's subnet on the benchmark's ports.
func startDoor(ctx context.Context, bin, dir, subnet, resolver string, ports []int) (*proxyProc, error) {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(p)
	}
	pol := filepath.Join(dir, "door-policy.hcl")
	src := fmt.Sprintf("mode = \"enforce\"\nports = [%s]\nallow_cidrs = [%q]\n", strings.Join(ps, ", "), subnet)
	if err := os.WriteFile(pol, []byte(src), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "door", "--policy", pol, "--listen", "127.0.0.1:0", "--resolver", resolver)
	return startProxy(ctx, "postern door", cmd, "", doorListening)
}

// startSquid runs squid in the foreground, allow-all, no cache, no logs.
func startSquid(ctx context.Context, dir, resolverIP string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "squid.conf")
	src := fmt.Sprintf(`http_port 127.0.0.1:%d
http_access allow all
`, port) + squidSettings(dir, resolverIP, "none")
	if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("squid", "-N", "-f", conf)
	return startProxy(ctx, "squid", cmd, fmt.Sprintf("127.0.0.1:%d", port), nil)
}

// squidSettings are the lines every squid of the benchmarks ends its
// configuration with: no cache and no logs, nothing slowing it that the door
// does not do either, its resolver and hosts file, and long idle timeouts
// for the idle tunnels.
func squidSettings(coredumpDir, resolver, hostsFile string) string {
	return fmt.Sprintf(`cache deny all
cache_mem 8 MB
access_log none
cache_store_log none
cache_log /dev/null
logfile_rotate 0
pid_filename none
coredump_dir %s
max_filedescriptors 65536
shutdown_lifetime 0 seconds
pinger_enable off
dns_nameservers %s
hosts_file %s
via off
forwarded_for delete
client_idle_pconn_timeout 10 minutes
read_timeout 10 minutes
`, coredumpDir, resolver, hostsFile)
}

// startTinyproxy runs tinyproxy in the foreground, allow-all, logging only
// critical errors.
func startTinyproxy(ctx context.Context, dir string) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "tinyproxy.conf")
	src := fmt.Sprintf(`User nobody
Group nogroup
Port %d
Listen 127.0.0.1
Timeout 600
MaxClients 20000
LogLevel Critical
DisableViaHeader Yes
`, port)
	if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("tinyproxy", "-d", "-c", conf)
	return startProxy(ctx, "tinyproxy", cmd, fmt.Sprintf("127.0.0.1:%d", port), nil)
}
