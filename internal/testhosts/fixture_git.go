//go:build linux

package testhosts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GitRepo is a bare repository of a few commits, as BuildGitRepo made it,
// served both ways: as static files (dumb HTTP) and through git http-backend
// (smart HTTP, with NginxOptions.GitRoot = GitRoot).
type GitRepo struct {
	// DumbPath is the repository's URL path as static files
	// ("/git/postern-fixture.git"); SmartPath its path on an nginx serving
	// GitRoot at NginxSmartGitPath ("/smart/postern-fixture.git").
	DumbPath, SmartPath string
	// GitRoot is the directory holding the bare repository, for
	// NginxOptions.GitRoot.
	GitRoot string
	// Head is the commit id of the main branch's tip; Commits how many
	// commits it has.
	Head    string
	Commits int
	// PayloadSHA256 is the hex SHA-256 of payload.bin at Head: PayloadSize
	// incompressible bytes.
	PayloadSHA256 string
}

// gitIdentity makes commits reproducible: fixed author, committer and dates,
// and no configuration but the repository's.
func gitIdentity(home string) []string {
	return append(baseEnv(),
		"HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=postern tests", "GIT_AUTHOR_EMAIL=tests@example.invalid", "GIT_AUTHOR_DATE=2024-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=postern tests", "GIT_COMMITTER_EMAIL=tests@example.invalid", "GIT_COMMITTER_DATE=2024-01-01T00:00:00Z")
}

// BuildGitRepo builds root/git/postern-fixture.git, a bare repository whose
// main branch has four commits: the first two (one adding a PayloadSize blob
// of incompressible bytes) packed, the last two left as loose objects, so a
// dumb-HTTP clone fetches both a pack and single objects. It runs
// "git update-server-info" so the static files serve dumb HTTP.
func BuildGitRepo(ctx context.Context, root string) (*GitRepo, error) {
	if _, err := lookTool("git", "git"); err != nil {
		return nil, fmt.Errorf("build git repository: %w", err)
	}
	gitRoot, err := fixtureDir(root, "git")
	if err != nil {
		return nil, fmt.Errorf("build git repository: %w", err)
	}
	const name = fixturePkg + ".git"
	g := &GitRepo{DumbPath: "/git/" + name, SmartPath: NginxSmartGitPath + name, GitRoot: gitRoot, Commits: 4}
	bare := filepath.Join(gitRoot, name)

	build, err := os.MkdirTemp(root, ".git-build-")
	if err != nil {
		return nil, fmt.Errorf("build git repository: %w", err)
	}
	defer os.RemoveAll(build)
	env := gitIdentity(build)
	work := filepath.Join(build, "work")
	git := func(dir string, args ...string) (string, error) {
		out, err := toolOutput(ctx, dir, env, "git", args...)
		return strings.TrimSpace(string(out)), err
	}
	write := func(name string, data []byte) error { return os.WriteFile(filepath.Join(work, name), data, 0o644) }
	steps := []func() error{
		func() error { _, err := git(build, "init", "-q", "-b", "main", work); return err },
		func() error { return write("README", []byte("A repository for postern's differential tests.\n")) },
		func() error { _, err := git(work, "add", "README"); return err },
		func() error { _, err := git(work, "commit", "-q", "-m", "readme"); return err },
		func() error { return write("payload.bin", Body(PayloadSize, GitPayloadSeed)) },
		func() error { _, err := git(work, "add", "payload.bin"); return err },
		func() error { _, err := git(work, "commit", "-q", "-m", "payload"); return err },
		func() error { _, err := git(build, "clone", "-q", "--bare", "--no-local", work, bare); return err },
		func() error { _, err := git(bare, "repack", "-q", "-a", "-d"); return err },
		func() error { return write("small.bin", Body(48<<10, GitPayloadSeed+1)) },
		func() error { _, err := git(work, "add", "small.bin"); return err },
		func() error { _, err := git(work, "commit", "-q", "-m", "small"); return err },
		func() error {
			return write("README", []byte("A repository for postern's differential tests.\nIts last commits are loose objects.\n"))
		},
		func() error { _, err := git(work, "commit", "-q", "-a", "-m", "readme again"); return err },
		// Few objects: receive-pack unpacks them loose (receive.unpackLimit).
		func() error { _, err := git(work, "push", "-q", bare, "main"); return err },
		func() error { _, err := git(bare, "update-server-info"); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("build git repository: %w", err)
		}
	}
	if g.Head, err = git(bare, "rev-parse", "refs/heads/main"); err != nil {
		return nil, fmt.Errorf("build git repository: %w", err)
	}
	if n, err := git(bare, "rev-list", "--count", "main"); err != nil || n != fmt.Sprint(g.Commits) {
		return nil, fmt.Errorf("build git repository: %s commits, want %d (%v)", n, g.Commits, err)
	}
	loose, err := git(bare, "count-objects")
	if err != nil || strings.HasPrefix(loose, "0 objects") {
		return nil, fmt.Errorf("build git repository: no loose objects (%q, %v): the dumb clone would fetch only a pack", loose, err)
	}
	g.PayloadSHA256 = BodySHA256(PayloadSize, GitPayloadSeed)
	return g, nil
}

// Clone runs "git clone" of repoURL (base + DumbPath or base + SmartPath)
// into a fresh directory under c.Dir with no system or global configuration
// and transfer.fsckObjects on, so git checks every object it receives. It
// then checks that HEAD is the fixture's Head with every commit, and that the
// checked-out payload is the fixture's. Fetched.File is the checked-out
// payload.bin.
func (g *GitRepo) Clone(ctx context.Context, repoURL string, c Client) (*Fetched, error) {
	if _, err := lookTool("git", "git"); err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	d := filepath.Join(c.Dir, "git")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	dest, err := os.MkdirTemp(d, "clone-")
	if err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	extra := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_TERMINAL_PROMPT=0"}
	args := []string{"git", "-c", "transfer.fsckObjects=true", "-c", "http.lowSpeedLimit=1", "-c", "http.lowSpeedTime=60"}
	if c.Proxy != "" {
		args = append(args, "-c", "http.proxy="+c.Proxy)
	}
	args = append(args, "clone", "--progress", repoURL, dest)
	_, out, err := c.run(ctx, d, extra, args...)
	if err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	// What git reports of the clone, read without the client's prefix: the
	// clone is a plain directory now.
	local := Client{Dir: c.Dir}
	head, _, err := local.run(ctx, dest, extra, "git", "rev-parse", "HEAD")
	if err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	count, _, err := local.run(ctx, dest, extra, "git", "rev-list", "--count", "HEAD")
	if err != nil {
		return nil, fmt.Errorf("git clone: %w", err)
	}
	if strings.TrimSpace(head) != g.Head || strings.TrimSpace(count) != fmt.Sprint(g.Commits) {
		return nil, fmt.Errorf("%w: the clone's HEAD is %s with %s commits, the fixture's is %s with %d", ErrMismatch, strings.TrimSpace(head), strings.TrimSpace(count), g.Head, g.Commits)
	}
	return checkFile(filepath.Join(dest, "payload.bin"), g.PayloadSHA256, out)
}
