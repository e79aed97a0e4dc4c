package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/machine"
)

// The controller trusts nothing an installed agent says about itself: a file
// that was replaced answers the handshake with whatever hash it likes. Before
// each use it looks at the file over sftp, which runs nothing of the agent's,
// and compares with what it measured when it installed it. sftp (version 3, as
// OpenSSH serves it) shows a file's size, type and permissions, owner and
// group, and modification time to the second; not its inode or change time.
// Since the owner can set a modification time back, a file whose attributes
// all match is also compared, at the head and at offsets chosen at random
// each time, with the agent built here. Anything that differs has the file
// read back and hashed; a file that is not the agent is installed again, and
// the person is told.

// FileState is what the controller measured of an installed agent's file,
// over sftp (machine.AgentFile, which the records keep).
type FileState = machine.AgentFile

// RemoteFile is a remote file open for reading.
type RemoteFile interface {
	io.Reader
	io.ReaderAt
	io.Closer
}

// ensure returns the state of the agent's file on the remote once it is the
// agent postern built, installing it when it is missing or is not. Nothing at
// the file's path is run to find out.
func ensure(ctx context.Context, t Transport, in Install) (FileState, error) {
	if k := in.Known; k != nil && k.Hash == in.Hash && k.Dir == in.Dir && strings.HasPrefix(k.Path, "/") {
		now, err := t.Stat(ctx, k.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return reinstall(ctx, t, in, nil)
		case err != nil:
			return FileState{}, fmt.Errorf("check the agent at %s over sftp: %w", k.Path, err)
		}
		now.Path, now.Dir = k.Path, in.Dir
		if !now.SameFile(*k) {
			return readBack(ctx, t, in, now, k.Differences(now))
		}
		diff, err := spotCheck(ctx, t, in.Binary, k.Path, now.Size)
		if err != nil {
			return FileState{}, fmt.Errorf("check the agent at %s over sftp: %w", k.Path, err)
		}
		if diff == "" {
			return *k, nil
		}
		return readBack(ctx, t, in, now, diff)
	}
	// Nothing is recorded of this agent on the machine: find its file and,
	// if there is one, read it back once.
	dir, err := prepare(ctx, t, in)
	if err != nil {
		return FileState{}, err
	}
	path := dir.abs + "/postern"
	now, err := t.Stat(ctx, path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return installIn(ctx, t, in, dir, nil)
	case err != nil:
		return FileState{}, fmt.Errorf("check the agent at %s over sftp: %w", path, err)
	}
	now.Path, now.Dir = path, in.Dir
	return readBack(ctx, t, in, now, "")
}

// readBack hashes the remote file: if it is the agent its state is recorded
// and it is used; if not, the person is told and the agent installed again.
func readBack(ctx context.Context, t Transport, in Install, now FileState, diff string) (FileState, error) {
	if now.Regular() {
		h, err := remoteHash(ctx, t, now.Path)
		if err != nil {
			return FileState{}, fmt.Errorf("read back the agent at %s over sftp: %w", now.Path, err)
		}
		if h == in.Hash {
			now.Hash, now.MeasuredAt = h, time.Now().UTC()
			in.record(now)
			return now, nil
		}
		diff = joinNonEmpty(diff, fmt.Sprintf("its content hashes to %.12s, not %.12s", h, in.Hash))
	} else {
		diff = joinNonEmpty(diff, "it is not a regular file")
	}
	if in.Warn != nil {
		if in.Known != nil {
			in.Warn(fmt.Sprintf("%s was changed since install (%s)", now.Path, diff))
		} else {
			in.Warn(fmt.Sprintf("%s is not the agent postern built (%s)", now.Path, diff))
		}
	}
	return reinstall(ctx, t, in, &now)
}

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// reinstall installs the agent again over what is at its path (old, if known).
func reinstall(ctx context.Context, t Transport, in Install, old *FileState) (FileState, error) {
	dir, err := prepare(ctx, t, in)
	if err != nil {
		return FileState{}, err
	}
	return installIn(ctx, t, in, dir, old)
}

// remoteHash reads a remote file back and returns its sha256.
func remoteHash(ctx context.Context, t Transport, path string) (string, error) {
	f, err := t.Open(ctx, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// What spotCheck compares: the head (headers and the start of the code), and
// blocks at offsets chosen at random each time.
const (
	spotHead   = 64 << 10
	spotBlock  = 4 << 10
	spotBlocks = 16
)

// spotCheck compares the remote file with the local agent at its head and at
// random offsets, and says where they differ ("" if nowhere it looked).
func spotCheck(ctx context.Context, t Transport, local, remote string, size int64) (string, error) {
	lf, err := os.Open(local)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	defer lf.Close()
	rf, err := t.Open(ctx, remote)
	if err != nil {
		return "", err
	}
	defer rf.Close()
	type span struct{ off, n int64 }
	spans := []span{{0, min(spotHead, size)}}
	if size > spotBlock {
		var seed [8 * spotBlocks]byte
		_, _ = rand.Read(seed[:])
		for i := range spotBlocks {
			off := int64(binary.LittleEndian.Uint64(seed[8*i:]) % uint64(size-spotBlock+1))
			spans = append(spans, span{off, spotBlock})
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		diff  string
		first error
	)
	for _, s := range spans {
		wg.Go(func() {
			want := make([]byte, s.n)
			got := make([]byte, s.n)
			_, lerr := lf.ReadAt(want, s.off)
			n, rerr := rf.ReadAt(got, s.off)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case lerr != nil && !errors.Is(lerr, io.EOF):
				first = cmpOr(first, fmt.Errorf("agent binary: %w", lerr))
			case rerr != nil && !errors.Is(rerr, io.EOF):
				first = cmpOr(first, rerr)
			case int64(n) != s.n || !bytes.Equal(want, got):
				if diff == "" {
					diff = fmt.Sprintf("size and modification time as recorded, but its content differs from the agent's at offset %d", s.off)
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return "", first
	}
	return diff, ctx.Err()
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
