package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// APIToken reads the API token from path, or makes one there (mode 0600,
// in a directory made 0700) if there is no file. created says which. A
// file that others may read is refused: the token opens every client's
// policy.
func APIToken(path string) (token string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		st, serr := os.Stat(path)
		if serr == nil && st.Mode().Perm()&0o077 != 0 {
			return "", false, fmt.Errorf("api token file %s has mode %s, readable by others; fix: chmod 600 %s", path, st.Mode().Perm(), path)
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < 16 {
			return "", false, fmt.Errorf("api token file %s holds %d characters, fewer than 16; fix: remove it and a new token is made at the next start", path, len(tok))
		}
		return tok, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("read api token file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("make the directory of api token file %s: %w", path, err)
	}
	tok, err := NewToken()
	if err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("make api token file: %w", err)
	}
	_, werr := f.WriteString(tok + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("write api token file %s: %w", path, werr)
	}
	return tok, true, nil
}

// IsLoopback reports whether a listen address (host:port) is on loopback
// only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
