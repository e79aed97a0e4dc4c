package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRemote is a machine behind a fake transport: a file system in a map, a
// shell that understands the few commands install sends, and "agents" that
// greet with the hash of their file's content.
type fakeRemote struct {
	mu      sync.Mutex
	home    string
	files   map[string][]byte
	noexec  bool
	freeKiB int64
	banner  string // printed before anything a command prints
	copies  int
	starts  int
}

func newFakeRemote() *fakeRemote {
	return &fakeRemote{home: "/home/u", files: map[string][]byte{}, freeKiB: 1 << 20}
}

var quoted = regexp.MustCompile(`(?:"\$HOME"/)?'([^']*)'`)

// paths extracts the quoted paths of a command, with "$HOME"/ expanded.
func (f *fakeRemote) paths(cmd string) []string {
	var out []string
	for _, m := range quoted.FindAllStringSubmatch(cmd, -1) {
		p := m[1]
		if strings.HasPrefix(m[0], `"$HOME"/`) {
			p = f.home + "/" + p
		}
		out = append(out, p)
	}
	return out
}

func (f *fakeRemote) Copy(ctx context.Context, local, remote string, progress func(done, total int64)) error {
	b, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copies++
	f.files[remote] = b
	if progress != nil {
		progress(int64(len(b)), int64(len(b)))
	}
	return nil
}

func (f *fakeRemote) Output(ctx context.Context, cmd string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.paths(cmd)
	switch {
	case strings.HasPrefix(cmd, "umask 077 && mkdir -p "):
		return []byte(fmt.Sprintf("%s\n/dev/sda1 100 50 %d 50%% /\n", p[0], f.freeKiB)), nil
	case strings.HasPrefix(cmd, "mv -f "):
		b, ok := f.files[p[0]]
		if !ok {
			return nil, &CommandError{Command: cmd, Code: 1, Stderr: "mv: no such file"}
		}
		delete(f.files, p[0])
		f.files[p[1]] = b
		return nil, nil
	case strings.HasPrefix(cmd, "rm -f "):
		delete(f.files, p[0])
		return nil, nil
	}
	return nil, &CommandError{Command: cmd, Code: 127, Stderr: "sh: unknown command"}
}

func (f *fakeRemote) Start(ctx context.Context, cmd string) (Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	path := f.paths(cmd)[0]
	p := &fakeProcess{done: make(chan struct{})}
	var inR *io.PipeReader
	inR, p.in = io.Pipe()
	var outW *io.PipeWriter
	p.out, outW = io.Pipe()
	b, ok := f.files[path]
	banner := f.banner
	switch {
	case !ok:
		p.fail(&CommandError{Command: cmd, Code: 127, Stderr: "sh: 1: exec: " + path + ": not found"}, outW, banner)
	case f.noexec:
		p.fail(&CommandError{Command: cmd, Code: 126, Stderr: "sh: 1: exec: " + path + ": Permission denied"}, outW, banner)
	default:
		go func() {
			defer close(p.done)
			defer outW.Close()
			io.WriteString(outW, banner)
			w := NewWriter(outW)
			w.WriteRaw([]byte(Magic))
			w.WriteJSON(FrameHello, Hello{Protocol: Protocol, Version: "test", Hash: sha(b)})
			io.Copy(io.Discard, inR) // until the controller closes stdin
		}()
	}
	return p, nil
}

type fakeProcess struct {
	in   *io.PipeWriter
	out  *io.PipeReader
	err  error
	done chan struct{}
}

func (p *fakeProcess) fail(err error, out *io.PipeWriter, banner string) {
	p.err = err
	go func() {
		io.WriteString(out, banner)
		out.Close()
		close(p.done)
	}()
}

func (p *fakeProcess) Stdin() io.WriteCloser { return p.in }
func (p *fakeProcess) Stdout() io.Reader     { return p.out }
func (p *fakeProcess) Wait() error           { <-p.done; return p.err }
func (p *fakeProcess) Close() error          { p.in.Close(); p.out.Close(); return nil }

func sha(b []byte) string {
	f, _ := os.CreateTemp("", "sha")
	defer os.Remove(f.Name())
	f.Write(b)
	f.Close()
	h, _ := fileHash(f.Name())
	return h
}

func testInstall(t *testing.T, content string) Install {
	t.Helper()
	p := filepath.Join(t.TempDir(), "postern-linux-amd64")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := FileHash(p)
	if err != nil {
		t.Fatal(err)
	}
	return Install{Binary: p, Hash: h, Version: "test"}
}

func dial(t *testing.T, r *fakeRemote, in Install) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, p, err := Dial(ctx, r, in)
	if err != nil {
		return err
	}
	if c.Hello.Hash != in.Hash {
		t.Fatalf("connected to an agent with hash %s, want %s", c.Hello.Hash, in.Hash)
	}
	p.Stdin().Close()
	p.Close()
	return nil
}

func TestDialInstallsOnceThenReuses(t *testing.T) {
	r := newFakeRemote()
	in := testInstall(t, "agent v1")
	if err := dial(t, r, in); err != nil {
		t.Fatal(err)
	}
	final := r.home + "/.cache/postern/agents/" + in.Hash + "/postern"
	if string(r.files[final]) != "agent v1" || r.copies != 1 || r.starts != 2 {
		t.Fatalf("after the first dial: files %v, copies %d, starts %d", keys(r.files), r.copies, r.starts)
	}
	for p := range r.files {
		if strings.Contains(p, ".postern.tmp-") {
			t.Fatalf("temporary file %s left behind", p)
		}
	}
	if err := dial(t, r, in); err != nil {
		t.Fatal(err)
	}
	if r.copies != 1 || r.starts != 3 {
		t.Fatalf("a warm dial uploaded again: copies %d, starts %d", r.copies, r.starts)
	}
}

func TestDialReinstallsDamagedAgent(t *testing.T) {
	r := newFakeRemote()
	in := testInstall(t, "agent v1")
	final := r.home + "/.cache/postern/agents/" + in.Hash + "/postern"
	r.files[final] = []byte("agent v1 but damaged")
	if err := dial(t, r, in); err != nil {
		t.Fatal(err)
	}
	if string(r.files[final]) != "agent v1" || r.copies != 1 {
		t.Fatalf("damaged agent not replaced: %q, copies %d", r.files[final], r.copies)
	}
}

func TestDialReportsNoexec(t *testing.T) {
	r := newFakeRemote()
	r.noexec = true
	err := dial(t, r, testInstall(t, "agent"))
	if !errors.Is(err, ErrNoexec) || !strings.Contains(err.Error(), "noexec") || !strings.Contains(err.Error(), "agent_dir") {
		t.Fatalf("noexec home: %v", err)
	}
}

func TestDialReportsFullHome(t *testing.T) {
	r := newFakeRemote()
	r.freeKiB = 1
	err := dial(t, r, testInstall(t, strings.Repeat("x", 4096)))
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "agent_dir") || r.copies != 0 {
		t.Fatalf("full home: %v (copies %d)", err, r.copies)
	}
}

func TestDialReportsShellBanner(t *testing.T) {
	r := newFakeRemote()
	r.banner = "Welcome! Today is a good day.\n"
	err := dial(t, r, testInstall(t, "agent"))
	if !errors.Is(err, ErrNotAgent) || !strings.Contains(err.Error(), "Welcome!") || !strings.Contains(err.Error(), ".bashrc") {
		t.Fatalf("shell banner: %v", err)
	}
}

func TestDialUsesAgentDir(t *testing.T) {
	r := newFakeRemote()
	in := testInstall(t, "agent")
	in.Dir = "/opt/postern agents"
	if err := dial(t, r, in); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.files["/opt/postern agents/"+in.Hash+"/postern"]; !ok {
		t.Fatalf("agent not in the configured directory: %v", keys(r.files))
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
