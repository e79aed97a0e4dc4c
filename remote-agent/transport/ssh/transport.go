package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// Transport carries the agent's installation and streams over one ssh
// connection. Its sftp session is opened on first use and shared; Close ends
// it.
type Transport struct {
	c *sshclient.Client

	mu      sync.Mutex
	sc      *sftp.Client
	session *ssh.Session // sc's
	// noSFTP is set once the remote refused the sftp subsystem: files are
	// then read, written and described through shell commands instead.
	noSFTP bool
}

var _ agent.Transport = (*Transport)(nil)

// NewTransport returns the transport over c; c stays the caller's to close.
func NewTransport(c *sshclient.Client) *Transport { return &Transport{c: c} }

// sftp returns the connection's sftp session, starting it if needed. A
// cancelled ctx ends it (and the next call starts another).
func (t *Transport) sftp(ctx context.Context) (*sftp.Client, func() bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.noSFTP {
		return nil, nil, errNoSFTP
	}
	if t.sc == nil {
		sc, session, err := startSFTP(t.c)
		if errors.Is(err, errNoSFTP) {
			t.noSFTP = true
		}
		if err != nil {
			return nil, nil, err
		}
		t.sc, t.session = sc, session
	}
	sc, session := t.sc, t.session
	stop := context.AfterFunc(ctx, func() { t.drop(sc, session) })
	return sc, stop, nil
}

// errNoSFTP means the remote's sshd refused the sftp subsystem (none is
// configured): the transport falls back to commands over exec channels.
var errNoSFTP = errors.New("the remote has no sftp subsystem")

// startSFTP asks the remote for its sftp subsystem on a session of its own.
// A refused request is errNoSFTP: that is the server's word that it has none.
func startSFTP(c *sshclient.Client) (*sftp.Client, *ssh.Session, error) {
	s, err := c.NewSession()
	if err != nil {
		return nil, nil, fmt.Errorf("open ssh session for sftp: %w", err)
	}
	w, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	r, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	if err := s.RequestSubsystem("sftp"); err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("%w (%v)", errNoSFTP, err)
	}
	sc, err := sftp.NewClientPipe(r, w, sftp.UseConcurrentWrites(true))
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("start sftp: %w", err)
	}
	return sc, s, nil
}

func (t *Transport) drop(sc *sftp.Client, session *ssh.Session) {
	t.mu.Lock()
	if t.sc == sc {
		t.sc, t.session = nil, nil
	}
	t.mu.Unlock()
	sc.Close()
	session.Close()
}

// Close ends the sftp session, if one was started; the ssh connection stays.
func (t *Transport) Close() error {
	t.mu.Lock()
	sc, session := t.sc, t.session
	t.sc, t.session = nil, nil
	t.mu.Unlock()
	if sc != nil {
		err := sc.Close()
		session.Close()
		return err
	}
	return nil
}

func (t *Transport) Stat(ctx context.Context, remote string) (agent.FileState, error) {
	sc, stop, err := t.sftp(ctx)
	if errors.Is(err, errNoSFTP) {
		return t.execStat(ctx, remote)
	}
	if err != nil {
		return agent.FileState{}, err
	}
	defer stop()
	fi, err := sc.Lstat(remote)
	if err != nil {
		return agent.FileState{}, fmt.Errorf("stat %s: %w", remote, err)
	}
	st := agent.FileState{Size: fi.Size(), Mode: uint32(fi.Mode()), Mtime: fi.ModTime().Unix()}
	if fs, ok := fi.Sys().(*sftp.FileStat); ok {
		st.UID, st.GID = fs.UID, fs.GID
	}
	return st, nil
}

func (t *Transport) Open(ctx context.Context, remote string) (agent.RemoteFile, error) {
	sc, stop, err := t.sftp(ctx)
	if errors.Is(err, errNoSFTP) {
		return t.execOpen(ctx, remote)
	}
	if err != nil {
		return nil, err
	}
	f, err := sc.Open(remote)
	if err != nil {
		stop()
		return nil, fmt.Errorf("open %s: %w", remote, err)
	}
	return &sftpFile{File: f, stop: stop}, nil
}

// sftpFile is a remote file open for reading; closing it also stops watching
// the context it was opened with.
type sftpFile struct {
	*sftp.File
	stop func() bool
}

func (f *sftpFile) Close() error {
	f.stop()
	return f.File.Close()
}

func (t *Transport) Copy(ctx context.Context, local, remote string, progress func(done, total int64)) error {
	src, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("open agent %s: %w", local, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	sc, stop, err := t.sftp(ctx)
	if errors.Is(err, errNoSFTP) {
		return t.execCopy(ctx, src, st.Size(), remote, progress)
	}
	if err != nil {
		return err
	}
	defer stop()
	dst, err := sc.OpenFile(remote, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL)
	if err != nil {
		return fmt.Errorf("create %s: %w", remote, err)
	}
	// The progress counts what is read, so the copy still goes through the
	// sftp file's own ReadFrom.
	var in io.Reader = src
	if progress != nil {
		in = &progressReader{r: src, total: st.Size(), fn: progress}
	}
	_, err = io.Copy(dst, in)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", remote, err)
	}
	if err := sc.Chmod(remote, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", remote, err)
	}
	return nil
}

func (t *Transport) Output(ctx context.Context, command string) ([]byte, error) {
	s, err := t.c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("open ssh session: %w", err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	if err := s.Run(command); err != nil {
		return out.Bytes(), commandError(command, err, errb.String())
	}
	return out.Bytes(), nil
}

func commandError(command string, err error, stderr string) error {
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return &agent.CommandError{Command: command, Code: ee.ExitStatus(), Stderr: stderr}
	}
	var em *ssh.ExitMissingError
	if errors.As(err, &em) {
		return &agent.CommandError{Command: command, Code: -1, Stderr: stderr}
	}
	return fmt.Errorf("remote command %q: %w", command, err)
}

func (t *Transport) Start(ctx context.Context, command string) (agent.Process, error) {
	s, err := t.c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("open ssh session: %w", err)
	}
	in, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	out, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	p := &process{s: s, in: in, out: out, command: command}
	s.Stderr = &p.stderr
	if err := s.Start(command); err != nil {
		s.Close()
		return nil, fmt.Errorf("start %q: %w", command, err)
	}
	return p, nil
}

type process struct {
	s       *ssh.Session
	in      io.WriteCloser
	out     io.Reader
	stderr  lockedBuffer
	command string
}

func (p *process) Stdin() io.WriteCloser { return p.in }
func (p *process) Stdout() io.Reader     { return p.out }
func (p *process) Wait() error {
	if err := p.s.Wait(); err != nil {
		return commandError(p.command, err, p.stderr.String())
	}
	return nil
}
func (p *process) Close() error { return p.s.Close() }
