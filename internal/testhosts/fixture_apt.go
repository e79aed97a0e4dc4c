//go:build linux

package testhosts

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Seeds of the fixtures' payloads, so a test can name the bytes it expects.
const (
	AptPayloadSeed = 0xa9
	PipPayloadSeed = 0x919
	NpmPayloadSeed = 0x9e
	GoPayloadSeed  = 0x90
	GitPayloadSeed = 0x917
	// PayloadSize is the length of each fixture's payload file.
	PayloadSize = 1 << 20
)

const (
	fixturePkg      = "postern-fixture"
	fixtureDate     = "Mon, 01 Jan 2024 00:00:00 UTC"
	fixtureMaintain = "postern tests <tests@example.invalid>"
)

// AptRepo is a flat apt repository of one package, as BuildAptRepo made it.
type AptRepo struct {
	// Path is the repository's URL path on the server ("/apt/"); the
	// sources line is "deb [trusted=yes] <server><Path> ./".
	Path string
	// Package and Version name the package ("postern-fixture", "1.0").
	Package, Version string
	// DebPath is the .deb's URL path, DebSHA256 its hex SHA-256, DebSize its
	// length.
	DebPath   string
	DebSHA256 string
	DebSize   int64
	// PayloadSHA256 is the hex SHA-256 of the payload file inside the package
	// (Body(PayloadSize, AptPayloadSeed)).
	PayloadSHA256 string
}

// BuildAptRepo builds root/apt/: a package built with dpkg-deb whose payload
// is PayloadSize bytes of incompressible data (stored uncompressed, so the
// .deb is as large), its Packages and Packages.gz made by dpkg-scanpackages,
// and an unsigned Release with their SHA256 sums, which is what apt needs to
// accept the repository as [trusted=yes] and to check the package's hash.
func BuildAptRepo(ctx context.Context, root string) (*AptRepo, error) {
	for _, t := range [][2]string{{"dpkg-deb", "dpkg"}, {"dpkg-scanpackages", "dpkg-dev"}} {
		if _, err := lookTool(t[0], t[1]); err != nil {
			return nil, fmt.Errorf("build apt repository: %w", err)
		}
	}
	dir, err := fixtureDir(root, "apt")
	if err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	r := &AptRepo{Path: "/apt/", Package: fixturePkg, Version: "1.0", PayloadSHA256: BodySHA256(PayloadSize, AptPayloadSeed)}
	deb := fmt.Sprintf("%s_%s_all.deb", r.Package, r.Version)
	r.DebPath = r.Path + deb

	build, err := os.MkdirTemp(root, ".apt-build-")
	if err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	defer os.RemoveAll(build)
	files := map[string][]byte{
		"DEBIAN/control": fmt.Appendf(nil, "Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: %s\nSection: misc\nPriority: optional\nDescription: payload for postern's differential tests\n",
			r.Package, r.Version, fixtureMaintain),
		"usr/share/" + fixturePkg + "/payload.bin": Body(PayloadSize, AptPayloadSeed),
	}
	for name, b := range files {
		p := filepath.Join(build, "pkg", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("build apt repository: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("build apt repository: %w", err)
		}
	}
	env := baseEnv()
	// -Znone: the payload does not compress, and stored it keeps the .deb's
	// size at the payload's.
	if _, err := toolOutput(ctx, build, env, "dpkg-deb", "--root-owner-group", "-Znone", "--build", "pkg", filepath.Join(dir, deb)); err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	packages, err := toolOutput(ctx, dir, env, "dpkg-scanpackages", "--multiversion", ".", "/dev/null")
	if err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	if !bytes.Contains(packages, []byte("SHA256: ")) {
		return nil, fmt.Errorf("build apt repository: dpkg-scanpackages wrote no SHA256 field:\n%s", packages)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(packages)
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	var release strings.Builder
	fmt.Fprintf(&release, "Origin: postern\nLabel: %s\nSuite: fixture\nCodename: fixture\nDate: %s\nDescription: postern's differential test repository\nSHA256:\n", fixturePkg, fixtureDate)
	for name, b := range map[string][]byte{"Packages": packages, "Packages.gz": gz.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, fmt.Errorf("build apt repository: %w", err)
		}
		fmt.Fprintf(&release, " %s %d %s\n", sha256Hex(b), len(b), name)
	}
	if err := os.WriteFile(filepath.Join(dir, "Release"), []byte(release.String()), 0o644); err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	st, err := os.Stat(filepath.Join(dir, deb))
	if err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	r.DebSize = st.Size()
	if r.DebSHA256, err = fileSHA256(filepath.Join(dir, deb)); err != nil {
		return nil, fmt.Errorf("build apt repository: %w", err)
	}
	return r, nil
}

// Fetch runs "apt-get update" and "apt-get download" for the package against
// the repository at base (the server's URL: "http://host:port"), with an apt
// configuration entirely under c.Dir: its own sources list, state, lists,
// cache and log directories, no system configuration parts, no locking of the
// system's directories, downloads as root (not _apt, which could not write
// there). apt checks the Release, Packages and .deb hashes itself; Fetch then
// compares the .deb with the one served. Fetched.File is the .deb.
func (r *AptRepo) Fetch(ctx context.Context, base string, c Client) (*Fetched, error) {
	if _, err := lookTool("apt-get", "apt"); err != nil {
		return nil, fmt.Errorf("apt fetch: %w", err)
	}
	d, err := c.freshDir("apt")
	if err != nil {
		return nil, fmt.Errorf("apt fetch: %w", err)
	}
	dirs := map[string]string{}
	for _, sub := range []string{"etc/apt.conf.d", "etc/sources.list.d", "etc/preferences.d", "etc/trusted.gpg.d",
		"state/lists/partial", "cache/archives/partial", "log", "download"} {
		p := filepath.Join(d, sub)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("apt fetch: %w", err)
		}
		dirs[sub] = p
	}
	proxy := "DIRECT"
	if c.Proxy != "" {
		proxy = c.Proxy
	}
	sources := fmt.Sprintf("deb [trusted=yes] %s ./\n", fixtureURL(base, r.Path))
	conf := fmt.Sprintf(`// Written by testhosts: nothing of the system's apt configuration is read.
Dir::Etc::Main "%[1]s/etc/apt.conf";
Dir::Etc::Parts "%[1]s/etc/apt.conf.d";
Dir::Etc::SourceList "%[1]s/etc/sources.list";
Dir::Etc::SourceParts "%[1]s/etc/sources.list.d";
Dir::Etc::Preferences "%[1]s/etc/preferences";
Dir::Etc::PreferencesParts "%[1]s/etc/preferences.d";
Dir::Etc::Trusted "%[1]s/etc/trusted.gpg";
Dir::Etc::TrustedParts "%[1]s/etc/trusted.gpg.d";
Dir::Etc::netrc "%[1]s/etc/auth.conf";
Dir::State "%[1]s/state";
Dir::State::Lists "%[1]s/state/lists";
Dir::State::status "%[1]s/state/status";
Dir::Cache "%[1]s/cache";
Dir::Cache::Archives "%[1]s/cache/archives";
Dir::Log "%[1]s/log";
Debug::NoLocking "true";
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::PDiffs "false";
Acquire::Retries "0";
Acquire::http::Proxy "%[2]s";
Acquire::https::Proxy "%[2]s";
`, d, proxy)
	for name, content := range map[string]string{"etc/sources.list": sources, "etc/apt.conf": "", "config": conf, "state/status": ""} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("apt fetch: %w", err)
		}
	}
	extra := []string{"APT_CONFIG=" + filepath.Join(d, "config"), "DEBIAN_FRONTEND=noninteractive"}
	_, out1, err := c.run(ctx, dirs["download"], extra, "apt-get", "-q", "update")
	if err != nil {
		return nil, fmt.Errorf("apt fetch: %w", err)
	}
	// apt-get update exits 0 when an index fails to download, with "Err:"
	// or "W: Failed to fetch" lines.
	if strings.Contains(out1, "Err:") || strings.Contains(out1, "Failed to fetch") || strings.Contains(out1, "E: ") {
		return nil, fmt.Errorf("apt fetch: apt-get update failed for %s:\n%s", fixtureURL(base, r.Path), out1)
	}
	_, out2, err := c.run(ctx, dirs["download"], extra, "apt-get", "-q", "download", r.Package+"="+r.Version)
	output := out1 + out2
	if err != nil {
		return nil, fmt.Errorf("apt fetch: %w", err)
	}
	return checkFile(filepath.Join(dirs["download"], filepath.Base(r.DebPath)), r.DebSHA256, output)
}
