//go:build linux

package testhosts

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PipIndex is a PEP 503 simple index of one project with one wheel, as
// BuildPipIndex made it.
type PipIndex struct {
	// Path is the index's URL path on the server ("/simple/"), what
	// pip's --index-url points at.
	Path string
	// Project and Version name the distribution ("postern-fixture", "1.0").
	Project, Version string
	// WheelPath is the wheel's URL path, WheelSHA256 its hex SHA-256 (the
	// link's #sha256= fragment), WheelSize its length.
	WheelPath   string
	WheelSHA256 string
	WheelSize   int64
	// PayloadSHA256 is the hex SHA-256 of the payload file inside the wheel.
	PayloadSHA256 string
}

// BuildPipIndex builds root/simple/: an index page, the project's page with a
// link "<wheel>#sha256=<hex>", and a wheel made to the wheel format's rules
// (METADATA, WHEEL and a RECORD of every file's hash) holding a PayloadSize
// payload stored uncompressed.
func BuildPipIndex(root string) (*PipIndex, error) {
	dir, err := fixtureDir(root, "simple")
	if err != nil {
		return nil, fmt.Errorf("build pip index: %w", err)
	}
	ix := &PipIndex{Path: "/simple/", Project: fixturePkg, Version: "1.0", PayloadSHA256: BodySHA256(PayloadSize, PipPayloadSeed)}
	mod := strings.ReplaceAll(ix.Project, "-", "_")
	distInfo := fmt.Sprintf("%s-%s.dist-info", mod, ix.Version)
	wheelName := fmt.Sprintf("%s-%s-py3-none-any.whl", mod, ix.Version)

	type file struct {
		name string
		data []byte
	}
	files := []file{
		{mod + "/__init__.py", []byte("\"\"\"Payload for postern's differential tests.\"\"\"\n")},
		{mod + "/payload.bin", Body(PayloadSize, PipPayloadSeed)},
		{distInfo + "/METADATA", fmt.Appendf(nil, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: payload for postern's differential tests\n", ix.Project, ix.Version)},
		{distInfo + "/WHEEL", []byte("Wheel-Version: 1.0\nGenerator: postern-testhosts\nRoot-Is-Purelib: true\nTag: py3-none-any\n")},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	files = append(files, file{distInfo + "/RECORD", []byte(record.String())})

	var whl bytes.Buffer
	zw := zip.NewWriter(&whl)
	for _, f := range files {
		method := zip.Deflate
		if strings.HasSuffix(f.name, ".bin") {
			method = zip.Store
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: method, Modified: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return nil, fmt.Errorf("build pip index: %w", err)
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, fmt.Errorf("build pip index: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("build pip index: %w", err)
	}
	ix.WheelSHA256, ix.WheelSize = sha256Hex(whl.Bytes()), int64(whl.Len())
	ix.WheelPath = ix.Path + ix.Project + "/" + wheelName

	page := func(title, body string) []byte {
		return fmt.Appendf(nil, "<!DOCTYPE html>\n<html>\n<head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>%s</title></head>\n<body>\n%s</body>\n</html>\n", html.EscapeString(title), body)
	}
	proj := filepath.Join(dir, ix.Project)
	if err := os.Mkdir(proj, 0o755); err != nil {
		return nil, fmt.Errorf("build pip index: %w", err)
	}
	for name, data := range map[string][]byte{
		filepath.Join(dir, "index.html"):  page("Simple index", fmt.Sprintf("<a href=\"%s/\">%s</a>\n", ix.Project, ix.Project)),
		filepath.Join(proj, "index.html"): page("Links for "+ix.Project, fmt.Sprintf("<a href=\"%s#sha256=%s\">%s</a>\n", wheelName, ix.WheelSHA256, wheelName)),
		filepath.Join(proj, wheelName):    whl.Bytes(),
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return nil, fmt.Errorf("build pip index: %w", err)
		}
	}
	return ix, nil
}

// Fetch runs "python3 -m pip download --no-deps" for the project from the
// index at base (the server's URL), isolated from every pip configuration
// file and PIP_ variable, with no cache, trusting the index's host for plain
// HTTP. pip checks the wheel against the link's #sha256= itself; Fetch then
// compares it with the one served. Fetched.File is the wheel.
func (ix *PipIndex) Fetch(ctx context.Context, base string, c Client) (*Fetched, error) {
	if _, err := lookTool("python3", "python3"); err != nil {
		return nil, fmt.Errorf("pip fetch: %w", err)
	}
	host, err := hostOf(base)
	if err != nil {
		return nil, fmt.Errorf("pip fetch: %w", err)
	}
	d, err := c.freshDir("pip")
	if err != nil {
		return nil, fmt.Errorf("pip fetch: %w", err)
	}
	dest := filepath.Join(d, "download")
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, fmt.Errorf("pip fetch: %w", err)
	}
	args := []string{"python3", "-m", "pip", "download", "--isolated", "--no-cache-dir", "--disable-pip-version-check",
		"--no-input", "--progress-bar", "off", "--retries", "0", "--no-deps",
		"--index-url", fixtureURL(base, ix.Path), "--trusted-host", host, "--dest", dest}
	if c.Proxy != "" {
		args = append(args, "--proxy", c.Proxy)
	}
	args = append(args, ix.Project+"=="+ix.Version)
	// PIP_CONFIG_FILE=/dev/null: not even the global or site files (which
	// --isolated still reads).
	_, out, err := c.run(ctx, dest, []string{"PYTHONDONTWRITEBYTECODE=1", "PIP_CONFIG_FILE=" + os.DevNull}, args...)
	if err != nil {
		return nil, fmt.Errorf("pip fetch: %w", err)
	}
	return checkFile(filepath.Join(dest, filepath.Base(ix.WheelPath)), ix.WheelSHA256, out)
}
