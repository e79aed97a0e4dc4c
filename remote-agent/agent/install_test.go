package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRemote is a machine behind a fake transport: a file system in a map, a
// shell that understands the few commands install sends, sftp's view of the
// files, and "agents" that greet with the hash of their file's content.
type fakeRemote struct {
	mu      sync.Mutex
	home    string
	files   map[string][]byte
	meta    map[string]fakeMeta
	dirs    map[string]bool // directories where the agent's file should be
	clock   int64           // modification times, in seconds
	noexec  bool
	freeKiB int64
	banner  string // printed before anything a command prints
	copies  int
	starts  int
	reads   int      // files opened over sftp
	started []string // content of each file started
}

type fakeMeta struct {
	mode  os.FileMode
	mtime int64
}

func newFakeRemote() *fakeRemote {
	return &fakeRemote{home: "/home/u", files: map[string][]byte{}, meta: map[string]fakeMeta{}, dirs: map[string]bool{},
		clock: 1_700_000_000, freeKiB: 1 << 20}
}

// put writes a file as the remote's user would, with a new modification time.
func (f *fakeRemote) put(path string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock++
	f.files[path] = b
	f.meta[path] = fakeMeta{0o700, f.clock}
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
	f.clock++
	f.files[remote] = b
	f.meta[remote] = fakeMeta{0o700, f.clock}
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
		if f.dirs[p[1]] {
			return nil, &CommandError{Command: cmd, Code: 1, Stderr: "mv: would move into a directory"}
		}
		f.files[p[1]], f.meta[p[1]] = b, f.meta[p[0]]
		delete(f.files, p[0])
		delete(f.meta, p[0])
		return nil, nil
	case strings.HasPrefix(cmd, "rm -rf -- "):
		for _, d := range p {
			for k := range f.files {
				if k == d || strings.HasPrefix(k, d+"/") {
					delete(f.files, k)
					delete(f.meta, k)
				}
			}
			delete(f.dirs, d)
		}
		return nil, nil
	case strings.HasPrefix(cmd, "rm -f "), strings.HasPrefix(cmd, "rm -rf "):
		delete(f.files, p[0])
		delete(f.meta, p[0])
		delete(f.dirs, p[0])
		return nil, nil
	case strings.HasPrefix(cmd, "rmdir "):
		return nil, nil
	case strings.HasPrefix(cmd, "cd ") && strings.Contains(cmd, "printf 'agent"):
		return []byte(f.listing(p[0])), nil
	}
	return nil, &CommandError{Command: cmd, Code: 127, Stderr: "sh: unknown command"}
}

// listing answers listCommand for base from the files there.
func (f *fakeRemote) listing(base string) string {
	out := base + "\n"
	seen := map[string]bool{}
	for k := range f.files {
		rest, ok := strings.CutPrefix(k, base+"/")
		if !ok {
			continue
		}
		h, name, _ := strings.Cut(rest, "/")
		if seen[h] || name != "postern" {
			continue
		}
		seen[h] = true
		out += fmt.Sprintf("agent 1 %d %d %s\n", f.meta[k].mtime, len(f.files[k])/1024, h)
	}
	return out
}

func (f *fakeRemote) Stat(ctx context.Context, remote string) (FileState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dirs[remote] {
		return FileState{Size: 4096, Mode: uint32(os.ModeDir | 0o700), Mtime: f.clock}, nil
	}
	b, ok := f.files[remote]
	if !ok {
		return FileState{}, fmt.Errorf("stat %s: %w", remote, fs.ErrNotExist)
	}
	m := f.meta[remote]
	return FileState{Size: int64(len(b)), Mode: uint32(m.mode), UID: 1000, GID: 1000, Mtime: m.mtime}, nil
}

type fakeFile struct{ *bytes.Reader }

func (fakeFile) Close() error { return nil }

func (f *fakeRemote) Open(ctx context.Context, remote string) (RemoteFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[remote]
	if !ok {
		return nil, fmt.Errorf("open %s: %w", remote, fs.ErrNotExist)
	}
	f.reads++
	return fakeFile{bytes.NewReader(bytes.Clone(b))}, nil
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
	case f.dirs[path]:
		p.fail(&CommandError{Command: cmd, Code: 126, Stderr: "sh: 1: exec: " + path + ": Permission denied"}, outW, banner)
	case !ok:
		p.fail(&CommandError{Command: cmd, Code: 127, Stderr: "sh: 1: exec: " + path + ": not found"}, outW, banner)
	case f.noexec:
		p.fail(&CommandError{Command: cmd, Code: 126, Stderr: "sh: 1: exec: " + path + ": Permission denied"}, outW, banner)
	default:
		f.started = append(f.started, string(b))
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
	// Nothing at the path: installed before anything is started there.
	if string(r.files[final]) != "agent v1" || r.copies != 1 || r.starts != 1 {
		t.Fatalf("after the first dial: files %v, copies %d, starts %d", keys(r.files), r.copies, r.starts)
	}
	for p := range r.files {
		if strings.Contains(p, ".postern.tmp-") {
			t.Fatalf("temporary file %s left behind", p)
		}
	}
	// Nothing recorded of it (another controller installed it): read back
	// once, then used.
	if err := dial(t, r, in); err != nil {
		t.Fatal(err)
	}
	if r.copies != 1 || r.starts != 2 || r.reads != 1 {
		t.Fatalf("a warm dial: copies %d, starts %d, reads %d; want 1, 2, 1", r.copies, r.starts, r.reads)
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

// recorder keeps what Dial records and warns, as the controller's records do.
type recorder struct {
	mu    sync.Mutex
	state *FileState
	warns []string
}

func (rec *recorder) install(in Install) Install {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.state != nil {
		k := *rec.state
		in.Known = &k
	}
	in.Record = func(st FileState) { rec.mu.Lock(); rec.state = &st; rec.mu.Unlock() }
	in.Warn = func(w string) { rec.mu.Lock(); rec.warns = append(rec.warns, w); rec.mu.Unlock() }
	return in
}

// agentBinary is content long enough that the spot check samples blocks.
func agentBinary() string {
	var b strings.Builder
	b.WriteString("\x7fELF agent ")
	for i := 0; b.Len() < 300<<10; i++ {
		fmt.Fprintf(&b, "%08d", i)
	}
	return b.String()
}

func TestDialTrustsNothingTheAgentSays(t *testing.T) {
	bin := agentBinary()
	script := "#!/bin/sh\ntouch /tmp/owned\nexec /home/u/real-postern \"$@\"\n"
	samePadded := "#!/bin/sh\nexec /home/u/real-postern \"$@\"\n#" + strings.Repeat("x", len(bin)-len("#!/bin/sh\nexec /home/u/real-postern \"$@\"\n#"))
	cases := []struct {
		name     string
		tamper   func(r *fakeRemote, final string)
		replaced bool   // the agent must be installed again, with a warning
		warn     string // in the warning
	}{
		{"unchanged", func(*fakeRemote, string) {}, false, ""},
		{"touched, same content", func(r *fakeRemote, final string) { r.put(final, []byte(bin)) }, false, ""},
		{"replaced by a script", func(r *fakeRemote, final string) { r.put(final, []byte(script)) }, true, "size"},
		{"replaced by a script of the same size and time", func(r *fakeRemote, final string) {
			m := r.meta[final]
			r.files[final] = []byte(samePadded)
			r.meta[final] = m
		}, true, "content differs from the agent's at offset"},
		{"one block changed in place, time set back", func(r *fakeRemote, final string) {
			b := []byte(r.files[final])
			copy(b[100:], "patched")
		}, true, "offset 0"},
		{"made a directory", func(r *fakeRemote, final string) {
			delete(r.files, final)
			r.dirs[final] = true
		}, true, "not a regular file"},
		{"removed", func(r *fakeRemote, final string) { delete(r.files, final) }, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newFakeRemote()
			in := testInstall(t, bin)
			rec := &recorder{}
			if err := dial(t, r, rec.install(in)); err != nil {
				t.Fatal(err)
			}
			final := r.home + "/.cache/postern/agents/" + in.Hash + "/postern"
			if rec.state == nil || rec.state.Path != final || rec.state.Hash != in.Hash || rec.state.Size != int64(len(bin)) || rec.state.Mtime == 0 {
				t.Fatalf("recorded at install: %+v", rec.state)
			}
			tc.tamper(r, final)
			copies, started := r.copies, len(r.started)
			if err := dial(t, r, rec.install(in)); err != nil {
				t.Fatal(err)
			}
			for _, c := range r.started[started:] {
				if c != bin {
					t.Fatalf("started a file that is not the agent: %.40q", c)
				}
			}
			if string(r.files[final]) != bin {
				t.Fatalf("the agent's path holds %.40q after the dial", r.files[final])
			}
			reinstalled := r.copies > copies
			if reinstalled != tc.replaced {
				t.Fatalf("installed again: %v, want %v (warnings %q)", reinstalled, tc.replaced, rec.warns)
			}
			warned := len(rec.warns) > 0
			if wantWarn := tc.replaced && tc.name != "removed"; warned != wantWarn {
				t.Fatalf("warnings %q, want one: %v", rec.warns, wantWarn)
			}
			if warned && (!strings.Contains(rec.warns[0], final) || !strings.Contains(rec.warns[0], "changed since install") || !strings.Contains(rec.warns[0], tc.warn)) {
				t.Fatalf("warning %q, want the path, 'changed since install' and %q", rec.warns[0], tc.warn)
			}
			if got := rec.state; got == nil || got.Hash != in.Hash || got.Size != int64(len(bin)) || got.Mtime != r.meta[final].mtime {
				t.Fatalf("recorded after the dial: %+v (file's mtime %d)", got, r.meta[final].mtime)
			}
		})
	}
}

// A file at the agent's path that no record speaks for is read back; one that
// is not the agent is never started.
func TestDialReadsBackWhatIsNotRecorded(t *testing.T) {
	r := newFakeRemote()
	in := testInstall(t, "agent v1")
	final := r.home + "/.cache/postern/agents/" + in.Hash + "/postern"
	r.put(final, []byte("#!/bin/sh\nexec real \"$@\"\n"))
	rec := &recorder{}
	if err := dial(t, r, rec.install(in)); err != nil {
		t.Fatal(err)
	}
	if len(r.started) != 1 || r.started[0] != "agent v1" || r.copies != 1 {
		t.Fatalf("started %q, copies %d; want only the agent, installed once", r.started, r.copies)
	}
	if len(rec.warns) != 1 || !strings.Contains(rec.warns[0], "is not the agent postern built") {
		t.Fatalf("warnings %q", rec.warns)
	}
}

// A recorded state for another agent directory is not used: the file is
// looked for where the agent is now configured to be.
func TestDialIgnoresStateOfAnotherDir(t *testing.T) {
	r := newFakeRemote()
	in := testInstall(t, "agent v1")
	rec := &recorder{}
	if err := dial(t, r, rec.install(in)); err != nil {
		t.Fatal(err)
	}
	in.Dir = "/opt/agents"
	if err := dial(t, r, rec.install(in)); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.files["/opt/agents/"+in.Hash+"/postern"]; !ok || rec.state.Path != "/opt/agents/"+in.Hash+"/postern" {
		t.Fatalf("agent not installed in the new directory: %v, recorded %+v", keys(r.files), rec.state)
	}
}
