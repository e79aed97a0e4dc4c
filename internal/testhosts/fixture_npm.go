//go:build linux

package testhosts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// npmTarballOrigin is the origin written into the metadata's dist.tarball,
// which a registry fills with its own absolute URL. The fixture cannot know
// the server's address or name in advance, so the document says
// "http://registry.invalid/-/<name>-<version>.tgz" and Fetch runs npm with
// --replace-registry-host=always, which rewrites it to the configured
// registry: npm 9 (Debian's) puts the registry URL before the tarball's path,
// npm 10 and later swap the origin and add the registry's path where the
// tarball's lacks it; both give <registry>/-/<name>-<version>.tgz. ".invalid"
// never resolves (RFC 6761), so a client that kept the origin fails at once
// instead of reaching anything.
const npmTarballOrigin = "http://registry.invalid"

// NpmRegistry is a registry of one package, as BuildNpmRegistry made it.
type NpmRegistry struct {
	// Path is the registry's URL path on the server ("/npm/"), what npm's
	// --registry points at.
	Path string
	// Package and Version name the package ("postern-fixture", "1.0.0").
	Package, Version string
	// MetadataPath is the URL path of the package document
	// (Path + Package).
	MetadataPath string
	// TarballPath is the .tgz's URL path; TarballSHA256 its hex SHA-256;
	// Integrity and Shasum the document's dist.integrity (sha512-…) and
	// dist.shasum (hex SHA-1), which npm checks.
	TarballPath   string
	TarballSHA256 string
	Integrity     string
	Shasum        string
	// PayloadSHA256 is the hex SHA-256 of package/payload.bin in the tarball,
	// the file npm installs as node_modules/<Package>/payload.bin.
	PayloadSHA256 string
}

// BuildNpmRegistry builds root/npm/: the package document at npm/<name>
// (dist-tags, versions, dist.tarball, dist.integrity, dist.shasum) and the
// tarball at npm/-/<name>-<version>.tgz holding package/package.json and a
// PayloadSize payload.
func BuildNpmRegistry(root string) (*NpmRegistry, error) {
	dir, err := fixtureDir(root, "npm")
	if err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	r := &NpmRegistry{Path: "/npm/", Package: fixturePkg, Version: "1.0.0", PayloadSHA256: BodySHA256(PayloadSize, NpmPayloadSeed)}
	r.MetadataPath = r.Path + r.Package
	tgzName := fmt.Sprintf("%s-%s.tgz", r.Package, r.Version)
	r.TarballPath = r.Path + "-/" + tgzName

	pkgJSON, err := json.MarshalIndent(map[string]any{
		"name": r.Package, "version": r.Version, "description": "payload for postern's differential tests",
		"license": "MIT", "files": []string{"payload.bin"},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"package/package.json", append(pkgJSON, '\n')},
		{"package/payload.bin", Body(PayloadSize, NpmPayloadSeed)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
			return nil, fmt.Errorf("build npm registry: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("build npm registry: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	s512, s1 := sha512.Sum512(tgz.Bytes()), sha1.Sum(tgz.Bytes())
	r.Integrity = "sha512-" + base64.StdEncoding.EncodeToString(s512[:])
	r.Shasum = hex.EncodeToString(s1[:])
	r.TarballSHA256 = sha256Hex(tgz.Bytes())

	doc, err := json.MarshalIndent(map[string]any{
		"name":      r.Package,
		"dist-tags": map[string]string{"latest": r.Version},
		"versions": map[string]any{r.Version: map[string]any{
			"name": r.Package, "version": r.Version, "description": "payload for postern's differential tests", "license": "MIT",
			"dist": map[string]string{"tarball": npmTarballOrigin + "/-/" + tgzName, "integrity": r.Integrity, "shasum": r.Shasum},
		}},
		"time": map[string]string{r.Version: mtime.Format(time.RFC3339), "created": mtime.Format(time.RFC3339), "modified": mtime.Format(time.RFC3339)},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "-"), 0o755); err != nil {
		return nil, fmt.Errorf("build npm registry: %w", err)
	}
	for name, data := range map[string][]byte{
		filepath.Join(dir, r.Package):    append(doc, '\n'),
		filepath.Join(dir, "-", tgzName): tgz.Bytes(),
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return nil, fmt.Errorf("build npm registry: %w", err)
		}
	}
	return r, nil
}

// Fetch runs "npm install <name>@<version>" in a fresh project under c.Dir
// against the registry at base (the server's URL), with a private cache and
// private user and global configuration files, no audit, fund or update
// check (nothing but the registry is asked), no install scripts. npm checks
// the tarball against dist.integrity itself; Fetch then checks the installed
// payload and the lockfile's integrity. Fetched.File is the installed
// payload.bin.
func (r *NpmRegistry) Fetch(ctx context.Context, base string, c Client) (*Fetched, error) {
	if _, err := lookTool("npm", "npm"); err != nil {
		return nil, fmt.Errorf("npm fetch: %w", err)
	}
	d, err := c.freshDir("npm")
	if err != nil {
		return nil, fmt.Errorf("npm fetch: %w", err)
	}
	project := filepath.Join(d, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		return nil, fmt.Errorf("npm fetch: %w", err)
	}
	for name, content := range map[string]string{
		filepath.Join(project, "package.json"): `{"name": "postern-fixture-consumer", "version": "1.0.0", "private": true}` + "\n",
		filepath.Join(d, "npmrc"):              "",
		filepath.Join(d, "global-npmrc"):       "",
	} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("npm fetch: %w", err)
		}
	}
	args := []string{"npm", "install", "--registry", fixtureURL(base, r.Path),
		"--cache", filepath.Join(d, "cache"), "--userconfig", filepath.Join(d, "npmrc"), "--globalconfig", filepath.Join(d, "global-npmrc"),
		"--replace-registry-host=always", "--no-audit", "--no-fund", "--update-notifier=false", "--ignore-scripts",
		"--fetch-retries=0", "--prefer-online"}
	if c.Proxy != "" {
		args = append(args, "--proxy", c.Proxy)
	}
	args = append(args, r.Package+"@"+r.Version)
	_, out, err := c.run(ctx, project, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("npm fetch: %w", err)
	}
	lock, err := os.ReadFile(filepath.Join(project, "package-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("npm fetch: npm wrote no lockfile: %w; it printed:\n%s", err, out)
	}
	var lf struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(lock, &lf); err != nil {
		return nil, fmt.Errorf("npm fetch: read lockfile: %w", err)
	}
	if p := lf.Packages["node_modules/"+r.Package]; p.Version != r.Version || p.Integrity != r.Integrity {
		return nil, fmt.Errorf("%w: the lockfile has %s@%q with integrity %q, the registry serves %s with %s", ErrMismatch, r.Package, p.Version, p.Integrity, r.Version, r.Integrity)
	}
	return checkFile(filepath.Join(project, "node_modules", r.Package, "payload.bin"), r.PayloadSHA256, out)
}
