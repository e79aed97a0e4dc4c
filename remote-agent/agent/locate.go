package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// ErrNoBinary means no agent was found for a machine's OS and architecture.
var ErrNoBinary = errors.New("no agent binary")

// BinaryName is the file name of the agent for goos/goarch.
func BinaryName(goos, goarch string) string { return "postern-" + goos + "-" + goarch }

// Locate finds the agent for goos/goarch: in $POSTERN_AGENT_DIR, else in agents/
// beside the running postern, else the running postern itself when it is built
// for that OS and architecture.
func Locate(goos, goarch string) (string, error) {
	name := BinaryName(goos, goarch)
	var tried []string
	if d := os.Getenv("POSTERN_AGENT_DIR"); d != "" {
		p := filepath.Join(d, name)
		if isFile(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	self, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(self); err == nil {
			self = r
		}
		p := filepath.Join(filepath.Dir(self), "agents", name)
		if isFile(p) {
			return p, nil
		}
		tried = append(tried, p)
		if goos == runtime.GOOS && goarch == runtime.GOARCH {
			return self, nil
		}
	}
	return "", fmt.Errorf("%w for %s/%s (looked at %v): build it with 'make build', which writes bin/agents/%s, or set POSTERN_AGENT_DIR to a directory holding it",
		ErrNoBinary, goos, goarch, tried, name)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func fileSize(p string) (int64, error) {
	st, err := os.Stat(p)
	if err != nil {
		return 0, fmt.Errorf("agent binary: %w", err)
	}
	return st.Size(), nil
}

var hashCache sync.Map // path+size+mtime -> hash

// CachedFileHash is FileHash, remembered for the life of the process for a file
// whose size and modification time have not changed.
func CachedFileHash(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	if h, ok := hashCache.Load(key); ok {
		return h.(string), nil
	}
	h, err := fileHash(path)
	if err != nil {
		return "", err
	}
	hashCache.Store(key, h)
	return h, nil
}
