//go:build linux

package testhosts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// GoProxy is a GOPROXY directory serving one module version, as BuildGoProxy
// made it.
type GoProxy struct {
	// Path is the proxy's URL path on the server ("/goproxy/"), what GOPROXY
	// points at.
	Path string
	// Module and Version name the module ("example.test/fixture", "v1.0.0").
	Module, Version string
	// ZipPath is the module zip's URL path; ZipSHA256 its hex SHA-256.
	ZipPath   string
	ZipSHA256 string
	// Sum and GoModSum are the module's go.sum hashes ("h1:…") for the zip
	// and for go.mod, computed here with golang.org/x/mod/sumdb/dirhash.
	Sum, GoModSum string
	// PayloadSHA256 is the hex SHA-256 of payload.bin in the module.
	PayloadSHA256 string
}

// BuildGoProxy builds root/goproxy/ for module example.test/fixture v1.0.0:
// @v/list, @v/v1.0.0.info, .mod and .zip, the zip made by golang.org/x/mod/zip
// (the go command's own rules) from go.mod, a Go file and a PayloadSize
// payload.bin.
func BuildGoProxy(root string) (*GoProxy, error) {
	dir, err := fixtureDir(root, "goproxy")
	if err != nil {
		return nil, fmt.Errorf("build goproxy: %w", err)
	}
	p := &GoProxy{Path: "/goproxy/", Module: "example.test/fixture", Version: "v1.0.0", PayloadSHA256: BodySHA256(PayloadSize, GoPayloadSeed)}
	gomod := []byte("module " + p.Module + "\n\ngo 1.21\n")

	src, err := os.MkdirTemp(root, ".goproxy-build-")
	if err != nil {
		return nil, fmt.Errorf("build goproxy: %w", err)
	}
	defer os.RemoveAll(src)
	for name, data := range map[string][]byte{
		"go.mod":      gomod,
		"fixture.go":  []byte("// Package fixture carries a payload for postern's differential tests.\npackage fixture\n"),
		"payload.bin": Body(PayloadSize, GoPayloadSeed),
	} {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			return nil, fmt.Errorf("build goproxy: %w", err)
		}
	}
	mv := module.Version{Path: p.Module, Version: p.Version}
	escaped, err := module.EscapePath(p.Module)
	if err != nil {
		return nil, fmt.Errorf("build goproxy: %w", err)
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return nil, fmt.Errorf("build goproxy: %w", err)
	}
	var zb bytes.Buffer
	if err := modzip.CreateFromDir(&zb, mv, src); err != nil {
		return nil, fmt.Errorf("build goproxy: zip %s: %w", mv, err)
	}
	zipFile := filepath.Join(vdir, p.Version+".zip")
	for name, data := range map[string][]byte{
		filepath.Join(dir, filepath.FromSlash(escaped), "@v", "list"): []byte(p.Version + "\n"),
		filepath.Join(vdir, p.Version+".info"):                        []byte(`{"Version":"` + p.Version + `","Time":"2024-01-01T00:00:00Z"}` + "\n"),
		filepath.Join(vdir, p.Version+".mod"):                         gomod,
		zipFile:                                                       zb.Bytes(),
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return nil, fmt.Errorf("build goproxy: %w", err)
		}
	}
	p.ZipPath = p.Path + escaped + "/@v/" + p.Version + ".zip"
	p.ZipSHA256 = sha256Hex(zb.Bytes())
	if p.Sum, err = dirhash.HashZip(zipFile, dirhash.Hash1); err != nil {
		return nil, fmt.Errorf("build goproxy: hash zip: %w", err)
	}
	// go.sum's /go.mod line hashes the file as a one-file tree named go.mod.
	if p.GoModSum, err = dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	}); err != nil {
		return nil, fmt.Errorf("build goproxy: hash go.mod: %w", err)
	}
	return p, nil
}

// goModDownload is the part of "go mod download -json" Fetch reads.
type goModDownload struct {
	Path, Version, Error string
	Info, GoMod, Zip     string
	Sum, GoModSum        string
}

// Fetch runs "go mod download -json <module>@<version>" outside any module
// with GOPROXY at the proxy on base (the server's URL), a private GOPATH,
// GOMODCACHE and GOCACHE under c.Dir, GOSUMDB=off, GOFLAGS empty, no go env
// file, and the installed toolchain only. The go command checks the zip's
// structure and hashes it; Fetch compares the Sum and GoModSum it reports
// with the ones computed independently at build, and the cached zip with the
// one served. Fetched.File is the zip in the module cache.
func (p *GoProxy) Fetch(ctx context.Context, base string, c Client) (*Fetched, error) {
	if _, err := lookTool("go", "golang-go"); err != nil {
		return nil, fmt.Errorf("go fetch: %w", err)
	}
	d, err := c.freshDir("go")
	if err != nil {
		return nil, fmt.Errorf("go fetch: %w", err)
	}
	work := filepath.Join(d, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("go fetch: %w", err)
	}
	extra := []string{
		"GOPROXY=" + fixtureURL(base, p.Path),
		"GOSUMDB=off", "GOFLAGS=", "GONOSUMDB=", "GONOPROXY=", "GOPRIVATE=", "GOINSECURE=", "GOVCS=",
		"GOPATH=" + filepath.Join(d, "gopath"),
		"GOMODCACHE=" + filepath.Join(d, "modcache"),
		"GOCACHE=" + filepath.Join(d, "cache"),
		"GOENV=off", "GOTOOLCHAIN=local", "GO111MODULE=on", "GOWORK=off",
	}
	// -modcacherw: the cache stays removable by whoever owns c.Dir.
	out, all, err := c.run(ctx, work, extra, "go", "mod", "download", "-json", "-modcacherw", p.Module+"@"+p.Version)
	if err != nil {
		return nil, fmt.Errorf("go fetch: %w", err)
	}
	var res goModDownload
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("go fetch: read go mod download -json output: %w:\n%s", err, out)
	}
	if res.Error != "" {
		return nil, fmt.Errorf("go fetch: go mod download: %s; it printed:\n%s", res.Error, all)
	}
	if res.Sum != p.Sum || res.GoModSum != p.GoModSum {
		return nil, fmt.Errorf("%w: go mod download reports Sum %s GoModSum %s, the fixture's are %s %s", ErrMismatch, res.Sum, res.GoModSum, p.Sum, p.GoModSum)
	}
	return checkFile(res.Zip, p.ZipSHA256, all)
}
