//go:build linux

package benchmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/postern-dev/postern/internal/testhosts"
)

// workDir makes the run's scratch directory, readable by everyone: the
// proxies and commands it holds may drop to nobody or proxy. The caller
// removes it.
func workDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// buildPostern builds ./cmd/postern into dir and returns the binary's path.
func buildPostern(ctx context.Context, log *slog.Logger, dir string) (string, error) {
	bin := filepath.Join(dir, "postern")
	log.Info("building postern", "out", bin)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/postern").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build postern (run from the module root, or pass the binary): %w: %s", err, out)
	}
	return bin, nil
}

// benchLab is the test hosts every benchmark needs: the upstream host, and
// a host serving DNS that knows nothing, for the door's and the proxies' own
// lookups (the benchmarks use addresses only, and nothing may ask a real
// resolver).
type benchLab struct {
	*testhosts.Lab
	upstream *testhosts.Host
	dns      *testhosts.RecordingDNS
}

// newBenchLab makes the lab, its hosts named "upstream" and "ns", and the DNS
// server; Close removes them all.
func newBenchLab(ctx context.Context, prefix string) (*benchLab, error) {
	lab, err := testhosts.NewLab(ctx, prefix)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*benchLab, error) {
		lab.Close()
		return nil, err
	}
	up, err := lab.Host(ctx, "upstream")
	if err != nil {
		return fail(err)
	}
	ns, err := lab.Host(ctx, "ns")
	if err != nil {
		return fail(err)
	}
	dns, err := ns.ServeDNS(53, nil)
	if err != nil {
		return fail(err)
	}
	return &benchLab{Lab: lab, upstream: up, dns: dns}, nil
}

// markdowner is a report that prints itself as markdown.
type markdowner interface {
	Markdown(w io.Writer) error
}

// WriteMarkdown prints rep as markdown to w and, when path is not empty, to
// the file at path as well.
func WriteMarkdown(rep markdowner, w io.Writer, path string) error {
	if err := rep.Markdown(w); err != nil {
		return err
	}
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(rep.Markdown(f), f.Close())
}
