//go:build linux

package testhosts

import (
	"context"
	"fmt"
	"os"
)

// Fixtures is every real-client fixture built under one root for one nginx
// to serve: NginxOptions{Root: f.Root, GitRoot: f.Git.GitRoot}.
type Fixtures struct {
	Root string
	Apt  *AptRepo
	Pip  *PipIndex
	Npm  *NpmRegistry
	Go   *GoProxy
	Git  *GitRepo
}

// BuildFixtures builds the apt, pip, npm, GOPROXY and git fixtures under root
// (made if missing), each in its own subdirectory.
func BuildFixtures(ctx context.Context, root string) (*Fixtures, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("build fixtures: %w", err)
	}
	f := &Fixtures{Root: root}
	var err error
	if f.Apt, err = BuildAptRepo(ctx, root); err != nil {
		return nil, err
	}
	if f.Pip, err = BuildPipIndex(root); err != nil {
		return nil, err
	}
	if f.Npm, err = BuildNpmRegistry(root); err != nil {
		return nil, err
	}
	if f.Go, err = BuildGoProxy(root); err != nil {
		return nil, err
	}
	if f.Git, err = BuildGitRepo(ctx, root); err != nil {
		return nil, err
	}
	return f, nil
}
