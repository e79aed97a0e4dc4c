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

// workDirWithPostern makes the run's scratch directory (see workDir) and,
// when bin is "" and build is true, builds postern into it. It returns the
// directory, which the caller removes, and the binary to run.
func workDirWithPostern(ctx context.Context, log *slog.Logger, prefix, bin string, build bool) (dir, postern string, err error) {
	dir, err = workDir(prefix)
	if err != nil {
		return "", "", err
	}
	if bin == "" && build {
		if bin, err = buildPostern(ctx, log, dir); err != nil {
			os.RemoveAll(dir)
			return "", "", err
		}
	}
	return dir, bin, nil
}

// ensureOrSkip installs the tools in want where it can (EnsureTools); each
// one still missing is noted, with why, and named in *skip so that its rows
// are not run. It returns what EnsureTools returned.
func ensureOrSkip(ctx context.Context, want []Tool, notes, skip *[]string) map[string]string {
	missing := EnsureTools(ctx, os.Stderr, want)
	for _, t := range want {
		if why, ok := missing[t.Program]; ok {
			*notes = append(*notes, t.Program+": "+why)
			*skip = append(*skip, t.Program)
		}
	}
	return missing
}

// capIdleTunnels raises the open-file limit and caps the idle tunnels asked
// for to what the limit holds, noting the cap. Each tunnel costs the proxy
// two descriptors; some are kept for listeners, logs and the upstream side.
func capIdleTunnels(asked int, notes *[]string) (int, error) {
	limit, err := raiseFileLimit(1 << 17)
	if err != nil {
		return 0, err
	}
	if most := (int(limit) - 300) / 2; asked > most {
		*notes = append(*notes, fmt.Sprintf("idle tunnels capped at %d (asked %d): the open-file hard limit is %d and cannot be raised here (no CAP_SYS_RESOURCE), and each tunnel holds at least two descriptors in the proxy", most, asked, limit))
		return most, nil
	}
	return asked, nil
}
