package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// hardened are settings given on every git command line: no hook runs, no
// file system monitor is started, nothing is signed, no automatic
// maintenance runs beside the command.
var hardened = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "commit.gpgSign=false",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "protocol.allow=never",
}

// git runs git commands in one repository.
type git struct {
	dir string
	// clean runs git without the system's or the user's configuration: for
	// the repositories postern makes on a machine. The caller's own
	// repository is read with the person's configuration (their global
	// ignore rules decide what is ignored), with hooks and monitors off.
	clean bool
	env   []string // more variables
}

// gitEnv is the environment of a git command: the process's, without any
// GIT_* variable that would point git elsewhere, plus what is fixed here.
func (g git) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C", "GIT_PAGER=cat", "GIT_ASKPASS=/bin/false")
	if g.clean {
		env = append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1")
	}
	return append(env, g.env...)
}

func (g git) cmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append(append([]string{}, hardened...), args...)
	if g.dir != "" {
		full = append([]string{"-C", g.dir}, full...)
	}
	c := exec.CommandContext(ctx, "git", full...)
	c.Env = g.environ()
	return c
}

// GitError is a git command that failed.
type GitError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *GitError) Error() string {
	msg := fmt.Sprintf("git %s: %v", strings.Join(e.Args, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		if len(s) > 600 {
			s = s[:600] + "…"
		}
		msg += ": " + s
	}
	return msg
}

func (e *GitError) Unwrap() error { return e.Err }

// out runs git and returns its stdout.
func (g git) out(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	c := g.cmd(ctx, args...)
	var stdout, stderr bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.Bytes(), &GitError{Args: args, Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// line runs git and returns its first line of output, trimmed.
func (g git) line(ctx context.Context, args ...string) (string, error) {
	b, err := g.out(ctx, nil, args...)
	if err != nil {
		return "", err
	}
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s), nil
}

// ok runs git and reports whether it exited 0; other failures are errors.
func (g git) ok(ctx context.Context, args ...string) (bool, error) {
	_, err := g.out(ctx, nil, args...)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false, nil
	}
	return err == nil, err
}

// ErrNoGit is a machine without git.
var ErrNoGit = errors.New("git is not installed")

// GitVersion is the version of git on this machine, or ErrNoGit.
func GitVersion(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", ErrNoGit
	}
	return git{clean: true}.line(ctx, "version")
}

// emptyTree is git's tree of nothing (sha1).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// validSHA reports whether s is a full hex object name.
func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func asGitError(err error, ge **GitError) bool { return errors.As(err, ge) }
