package ssh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/postern-dev/postern/remote-agent/agent"
)

// Without an sftp subsystem on the remote (sshd with no Subsystem sftp line),
// the agent's file is described, read and written by shell commands over exec
// channels, as Ansible falls back to piping: stat(1) for what sftp would show,
// cat(1) to read it back, and 'cat > tmp' to write it, the written file's
// sha256 compared with the agent's before it is moved into place. Nothing of
// the agent's is run to do so.

// maxExecRead bounds a file read back through cat: agents are ~12 MB.
const maxExecRead = 256 << 20

// statCommand prints what statLine parses: size, mode (hex, st_mode), uid,
// gid and modification time of the file itself (a final symbolic link is not
// followed), with GNU stat or, failing that, BSD's; "missing" if nothing is
// there.
func statCommand(path string) string {
	q := agent.ShellQuote(path)
	return "if [ -e " + q + " ] || [ -L " + q + " ]; then stat -c '%s %f %u %g %Y' -- " + q +
		" 2>/dev/null || stat -f '%z %Xp %u %g %m' -- " + q + "; else echo missing; fi"
}

// statLine parses statCommand's answer, which comes from the remote.
func statLine(out string) (agent.FileState, error) {
	line := strings.TrimSpace(out)
	if line == "missing" {
		return agent.FileState{}, fs.ErrNotExist
	}
	f := strings.Fields(line)
	if len(f) != 5 {
		return agent.FileState{}, fmt.Errorf("unexpected answer from stat: %q", firstLineOf(line))
	}
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	mode, err2 := strconv.ParseUint(f[1], 16, 32)
	uid, err3 := strconv.ParseUint(f[2], 10, 32)
	gid, err4 := strconv.ParseUint(f[3], 10, 32)
	mtime, err5 := strconv.ParseInt(f[4], 10, 64)
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			return agent.FileState{}, fmt.Errorf("unexpected answer from stat: %q", firstLineOf(line))
		}
	}
	if size < 0 {
		return agent.FileState{}, fmt.Errorf("unexpected answer from stat: size %d", size)
	}
	return agent.FileState{Size: size, Mode: uint32(unixMode(uint32(mode))), UID: uint32(uid), GID: uint32(gid), Mtime: mtime}, nil
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 200 {
		l = l[:200] + "…"
	}
	return l
}

// unixMode turns a st_mode into an os.FileMode, as sftp's client does with
// the same bits, so what was recorded over sftp compares with this.
func unixMode(m uint32) os.FileMode {
	fm := os.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o040000:
		fm |= os.ModeDir
	case 0o120000:
		fm |= os.ModeSymlink
	case 0o010000:
		fm |= os.ModeNamedPipe
	case 0o140000:
		fm |= os.ModeSocket
	case 0o020000:
		fm |= os.ModeDevice | os.ModeCharDevice
	case 0o060000:
		fm |= os.ModeDevice
	case 0o100000:
	default:
		fm |= os.ModeIrregular
	}
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

func (t *Transport) execStat(ctx context.Context, remote string) (agent.FileState, error) {
	out, err := t.Output(ctx, statCommand(remote))
	if err != nil {
		return agent.FileState{}, fmt.Errorf("stat %s: %w", remote, err)
	}
	st, err := statLine(string(out))
	if err != nil {
		return agent.FileState{}, fmt.Errorf("stat %s: %w", remote, err)
	}
	return st, nil
}

// execOpen reads the remote file whole with cat; its ReadAt serves from what
// was read.
func (t *Transport) execOpen(ctx context.Context, remote string) (agent.RemoteFile, error) {
	b, err := t.execRead(ctx, remote)
	if err != nil {
		return nil, err
	}
	return readFile{bytes.NewReader(b)}, nil
}

type readFile struct{ *bytes.Reader }

func (readFile) Close() error { return nil }

func (t *Transport) execRead(ctx context.Context, remote string) ([]byte, error) {
	s, err := t.c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("open ssh session: %w", err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	out, err := s.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var errb lockedBuffer
	s.Stderr = &errb
	command := "cat -- " + agent.ShellQuote(remote)
	if err := s.Start(command); err != nil {
		return nil, fmt.Errorf("read %s: %w", remote, err)
	}
	b, rerr := io.ReadAll(io.LimitReader(out, maxExecRead+1))
	if len(b) > maxExecRead {
		return nil, fmt.Errorf("read %s: longer than %d bytes", remote, maxExecRead)
	}
	if err := s.Wait(); err != nil {
		return nil, fmt.Errorf("read %s: %w", remote, commandError(command, err, errb.String()))
	}
	if rerr != nil {
		return nil, fmt.Errorf("read %s: %w", remote, rerr)
	}
	return b, nil
}

// copyCommand writes its stdin to a new file (never over one: noclobber),
// makes it executable by its owner alone, and prints its sha256 with
// sha256sum or shasum, or "nohash" when the remote has neither.
func copyCommand(remote string) string {
	q := agent.ShellQuote(remote)
	return "umask 077 && set -C && cat > " + q + " && chmod 700 " + q +
		" && { sha256sum -- " + q + " 2>/dev/null || shasum -a 256 -- " + q + " 2>/dev/null || echo nohash; }"
}

// execCopy writes src to remote through 'cat >' and checks that what landed
// hashes as what was sent: by the remote's sha256sum, or, without one, by
// reading it back.
func (t *Transport) execCopy(ctx context.Context, src io.Reader, size int64, remote string, progress func(done, total int64)) error {
	s, err := t.c.NewSession()
	if err != nil {
		return fmt.Errorf("open ssh session: %w", err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	h := sha256.New()
	var in io.Reader = io.TeeReader(src, h)
	if progress != nil {
		in = &progressReader{r: in, total: size, fn: progress}
	}
	s.Stdin = in
	var out, errb lockedBuffer
	s.Stdout, s.Stderr = &out, &errb
	command := copyCommand(remote)
	if err := s.Run(command); err != nil {
		return fmt.Errorf("write %s through cat (the remote has no sftp): %w", remote, commandError(command, err, errb.String()))
	}
	want := hex.EncodeToString(h.Sum(nil))
	f := strings.Fields(out.String())
	got := ""
	switch {
	case len(f) >= 1 && f[0] == "nohash":
		b, err := t.execRead(ctx, remote)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		got = hex.EncodeToString(sum[:])
	case len(f) >= 1:
		got = strings.ToLower(f[0])
	}
	if got != want {
		return fmt.Errorf("write %s through cat: the file written hashes to %.12s, want %.12s: it was changed or cut short on the way", remote, got, want)
	}
	return nil
}

type progressReader struct {
	r           io.Reader
	done, total int64
	fn          func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	p.fn(p.done, p.total)
	return n, err
}
