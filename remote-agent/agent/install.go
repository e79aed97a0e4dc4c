package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Transport is how the controller reaches a machine. The ssh transport is the real
// one; tests use a fake.
type Transport interface {
	// Copy uploads the local file to the remote absolute path, with mode 0700,
	// reporting progress.
	Copy(ctx context.Context, local, remote string, progress func(done, total int64)) error
	// Output runs a shell command and returns its stdout. A command that ran and
	// failed returns a *CommandError.
	Output(ctx context.Context, command string) ([]byte, error)
	// Start runs a shell command with its stdin and stdout connected. Closing
	// the Process ends the command.
	Start(ctx context.Context, command string) (Process, error)
	// Stat describes the remote file at an absolute path, without following
	// a final symbolic link and without running anything on the remote (over
	// sftp); Path, Dir and Hash are left empty. A missing file is
	// fs.ErrNotExist.
	Stat(ctx context.Context, remote string) (FileState, error)
	// Open opens the remote file at an absolute path for reading, without
	// running anything on the remote (over sftp).
	Open(ctx context.Context, remote string) (RemoteFile, error)
}

// Process is a started remote command.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	// Wait waits for the command; a failure is a *CommandError.
	Wait() error
	Close() error
}

// CommandError is a remote command that ran and failed.
type CommandError struct {
	Command string
	Code    int // exit status; -1 if it ended without one (signal, dropped)
	Stderr  string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("remote command %q exited with status %d", e.Command, e.Code)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// DefaultDir is where agents are installed, under the remote user's home.
const DefaultDir = "~/.cache/postern/agents"

// Install names the agent a machine should run and how to put it there.
type Install struct {
	// Binary is the local agent executable for the machine's OS and architecture.
	Binary string
	// Hash is Binary's sha256 (hex); see FileHash.
	Hash string
	// Dir is the remote directory agents are installed under; "" is DefaultDir.
	// A leading "~/" is the remote user's home.
	Dir     string
	Version string
	// Progress, if set, sees the upload's progress.
	Progress func(done, total int64)
	// Known is what was recorded of this agent's file on the machine when it
	// was installed or last read back; nil if nothing was.
	Known *FileState
	// Record, if set, is given the file's state each time it is installed or
	// read back and found to be the agent, to be Known next time.
	Record func(FileState)
	// Warn, if set, is told when the file at the agent's path was not the
	// agent (it is installed again): the path and what differed.
	Warn func(what string)
	// Removed, if set, is told of each old version installing removed
	// (see Keep).
	Removed func(Installed)
}

func (in Install) record(st FileState) {
	if in.Record != nil {
		in.Record(st)
	}
}

// FileHash is the sha256 of a file, hex.
func FileHash(path string) (string, error) { return fileHash(path) }

// Errors of installing.
var (
	// ErrNoexec means the agent was installed but the remote would not run it.
	ErrNoexec = errors.New("the remote refuses to run the installed agent")
	// ErrNoSpace means the remote directory has no room for the agent.
	ErrNoSpace = errors.New("no room for the agent on the remote")
)

// shellQuote quotes s for a POSIX shell, keeping a leading "~/" as "$HOME/".
func shellQuote(s string) string {
	prefix := ""
	if rest, ok := strings.CutPrefix(s, "~/"); ok {
		prefix, s = `"$HOME"/`, rest
	} else if s == "~" {
		return `"$HOME"`
	}
	return prefix + "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (in Install) dir() string {
	d := in.Dir
	if d == "" {
		d = DefaultDir
	}
	return strings.TrimRight(d, "/") + "/" + in.Hash
}

// Path is where the agent lives on the remote (with "~/" for the home).
func (in Install) Path() string { return in.dir() + "/postern" }

// serveCommand starts the agent at an absolute path, the one that was checked.
func serveCommand(path string) string { return "exec " + shellQuote(path) + " __agent serve" }

// Dial starts the agent on the remote and completes the handshake. First it
// checks, over sftp and without running it, that the file at the agent's path
// is the agent postern built (see FileState): one that is missing, changed or
// not the agent is installed again. An agent that then fails to start or
// answers with another hash or version is installed and started again too.
func Dial(ctx context.Context, t Transport, in Install) (*Client, Process, error) {
	st, err := ensure(ctx, t, in)
	if err != nil {
		return nil, nil, err
	}
	c, p, err := start(ctx, t, in, st.Path)
	if err == nil {
		return c, p, nil
	}
	if !installable(err) {
		return nil, nil, err
	}
	first := err
	if st, err = reinstall(ctx, t, in, &st); err != nil {
		return nil, nil, err
	}
	c, p, err = start(ctx, t, in, st.Path)
	if err != nil {
		return nil, nil, explainStart(st.Path, first, err)
	}
	return c, p, nil
}

// startError is a failed start, with what the remote said on stderr.
type startError struct {
	err    error
	code   int // exit status, -1 if unknown
	stderr string
	hash   bool // the agent answered with another hash or version
}

func (e *startError) Error() string {
	msg := e.err.Error()
	if s := strings.TrimSpace(e.stderr); s != "" {
		msg += " (remote said: " + firstLine(s) + ")"
	}
	return msg
}
func (e *startError) Unwrap() error { return e.err }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return line
}

func start(ctx context.Context, t Transport, in Install, path string) (*Client, Process, error) {
	p, err := t.Start(ctx, serveCommand(path))
	if err != nil {
		return nil, nil, fmt.Errorf("start the agent: %w", err)
	}
	c, herr := Handshake(ctx, p.Stdout(), p.Stdin(), in.Version)
	if herr == nil {
		switch {
		case c.Hello.Error != "":
			herr = &startError{err: fmt.Errorf("the agent at %s cannot serve: %s", path, c.Hello.Error), code: -1, hash: true}
		case c.Hello.Hash != in.Hash:
			herr = &startError{err: fmt.Errorf("the agent at %s has hash %.12s, want %.12s: its file is damaged", path, c.Hello.Hash, in.Hash), code: -1, hash: true}
		default:
			return c, p, nil
		}
		_ = p.Stdin().Close()
		_ = p.Close()
		return nil, nil, herr
	}
	// The handshake failed: the process probably ended; its status says why.
	_ = p.Stdin().Close()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-time.After(2 * time.Second):
	}
	_ = p.Close()
	se := &startError{err: herr, code: -1}
	var ce *CommandError
	if errors.As(werr, &ce) {
		se.code, se.stderr = ce.Code, ce.Stderr
	}
	return nil, nil, se
}

// installable reports whether a failed start may be mended by installing: the
// file is missing (127), cannot be executed as it is (126), is damaged, or is not
// an agent at all.
func installable(err error) bool {
	var se *startError
	if !errors.As(err, &se) {
		return false
	}
	return se.hash || se.code == 126 || se.code == 127 || errors.Is(se.err, ErrNotAgent)
}

// explainStart turns a start that failed even after installing into a message
// with the fix.
func explainStart(path string, before, after error) error {
	var se *startError
	if !errors.As(after, &se) {
		return after
	}
	switch {
	case se.code == 126:
		return fmt.Errorf("%w: %s was installed but cannot be executed (%s): the directory is probably on a filesystem mounted noexec; fix: set agent_dir to a directory on a filesystem that allows executables (postern machine add NAME --ssh DEST --agent-dir DIR, or agent_dir in the inventory)",
			ErrNoexec, path, firstLine(strings.TrimSpace(se.stderr)))
	case se.hash:
		return fmt.Errorf("the agent was installed again at %s but still answers wrongly: %w", path, after)
	case errors.Is(se.err, ErrNotAgent):
		return fmt.Errorf("the remote did not start the agent cleanly: %w; if the remote's shell startup files (~/.bashrc, ~/.profile) print anything for non-interactive shells, make them quiet", after)
	}
	return fmt.Errorf("start the agent after installing it: %w (before installing: %v)", after, before)
}

// agentDir is the agent's directory on the remote as prepare found it.
type agentDir struct {
	abs      string // absolute, symbolic links resolved
	availKiB int64  // room left there; -1 if unknown
}

// prepare makes the agent's directory, resolves it, and says how much room it
// has, in one round trip.
func prepare(ctx context.Context, t Transport, in Install) (agentDir, error) {
	dir := in.dir()
	cmd := "umask 077 && mkdir -p " + shellQuote(dir) + " && cd " + shellQuote(dir) + " && pwd -P && df -Pk . | tail -n 1"
	out, err := t.Output(ctx, cmd)
	if err != nil {
		return agentDir{}, fmt.Errorf("prepare the agent directory %s on the remote: %w; fix: make it writable, or set agent_dir", dir, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 1 || !strings.HasPrefix(lines[0], "/") {
		return agentDir{}, fmt.Errorf("prepare the agent directory %s on the remote: unexpected answer %q", dir, out)
	}
	d := agentDir{abs: lines[0], availKiB: -1}
	if len(lines) >= 2 {
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 4 {
			if avail, err := strconv.ParseInt(f[3], 10, 64); err == nil {
				d.availKiB = avail
			}
		}
	}
	return d, nil
}

// installIn uploads the agent to a temporary name in its directory and renames
// it into place, so a half-written agent is never run, then measures the file
// over sftp. old is what was at the path before, if known: something that is
// not a file (a directory the agent would be moved into) is removed first.
func installIn(ctx context.Context, t Transport, in Install, dir agentDir, old *FileState) (FileState, error) {
	st, err := installFile(ctx, t, in, dir, old)
	if err != nil {
		// prepare made the version's directory: one left empty is removed
		// (rmdir leaves one that holds anything).
		_, _ = t.Output(context.WithoutCancel(ctx), "rmdir "+shellQuote(dir.abs)+" 2>/dev/null; true")
		return FileState{}, err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pruneTimeout)
	defer cancel()
	prune(pctx, t, in)
	return st, nil
}

// pruneTimeout bounds the removal of old versions after an install.
const pruneTimeout = 30 * time.Second

func installFile(ctx context.Context, t Transport, in Install, dir agentDir, old *FileState) (FileState, error) {
	abs := dir.abs
	size, err := fileSize(in.Binary)
	if err != nil {
		return FileState{}, err
	}
	if dir.availKiB >= 0 && dir.availKiB*1024 < size+(1<<20) {
		return FileState{}, fmt.Errorf("%w: %s has %d KiB free and the agent needs %d KiB; fix: free space there, or set agent_dir to a directory with room", ErrNoSpace, abs, dir.availKiB, size/1024+1)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := abs + "/.postern.tmp-" + hex.EncodeToString(rnd[:])
	if err := t.Copy(ctx, in.Binary, tmp, in.Progress); err != nil {
		_, _ = t.Output(context.WithoutCancel(ctx), "rm -f "+shellQuote(tmp))
		if strings.Contains(strings.ToLower(err.Error()), "space") {
			return FileState{}, fmt.Errorf("%w: upload to %s: %v; fix: free space there, or set agent_dir", ErrNoSpace, abs, err)
		}
		return FileState{}, fmt.Errorf("upload the agent to %s: %w", tmp, err)
	}
	final := abs + "/postern"
	if old != nil && !old.Regular() {
		if _, err := t.Output(ctx, "rm -rf "+shellQuote(final)); err != nil {
			_, _ = t.Output(context.WithoutCancel(ctx), "rm -f "+shellQuote(tmp))
			return FileState{}, fmt.Errorf("remove what is at the agent's path %s: %w", final, err)
		}
	}
	if _, err := t.Output(ctx, "mv -f "+shellQuote(tmp)+" "+shellQuote(final)); err != nil {
		_, _ = t.Output(context.WithoutCancel(ctx), "rm -f "+shellQuote(tmp))
		return FileState{}, fmt.Errorf("move the agent into place at %s: %w", final, err)
	}
	st, err := t.Stat(ctx, final)
	if err != nil {
		return FileState{}, fmt.Errorf("check the agent installed at %s over sftp: %w", final, err)
	}
	st.Dir, st.Path, st.Hash, st.MeasuredAt = in.Dir, final, in.Hash, time.Now().UTC()
	if st.Size != size || !st.Regular() {
		return FileState{}, fmt.Errorf("the agent installed at %s is %d bytes (%s), want %d: the remote changed it as it was put in place", final, st.Size, os.FileMode(st.Mode), size)
	}
	in.record(st)
	return st, nil
}

// Start starts another agent process at the path Dial checked, and completes
// its handshake (the agent must answer with in's hash and version): for a
// further request on a machine whose agent was just dialled.
func (in Install) Start(ctx context.Context, t Transport) (*Client, Process, error) {
	return start(ctx, t, in, in.Path())
}
