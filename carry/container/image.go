package container

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ImageFile is one entry of an image built from nothing: a directory (Path ends
// in "/"), a symbolic link (Link set), or a file whose bytes are Data or, when
// Source is set, the file at Source on this machine.
type ImageFile struct {
	Path   string
	Mode   fs.FileMode // permission bits; 0 means 0755 for directories and executables, 0644 otherwise
	Data   []byte
	Source string
	Link   string
}

var imageNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// importTimeout bounds building and importing an image.
const importTimeout = 2 * time.Minute

// BuildImage makes a root filesystem holding exactly files, imports it into the
// engine as localhost/NAME:<hash of its contents> unless an image of that name is
// already there, and returns the reference. No registry is asked for anything.
func BuildImage(ctx context.Context, e *Engine, name string, files []ImageFile) (string, error) {
	if !imageNameRE().MatchString(name) {
		return "", fmt.Errorf("image name %q: use lowercase letters, digits, '.', '_' and '-'", name)
	}
	tarball, err := rootfsTar(files)
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", name, err)
	}
	sum := sha256.Sum256(tarball)
	ref := "localhost/" + name + ":" + hex.EncodeToString(sum[:])[:16]
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	if _, err := e.output(ctx, "image", "inspect", "--format", "{{.Id}}", ref); err == nil {
		return ref, nil
	}
	cmd := e.command(ctx, "import", "-", ref)
	cmd.Stdin = bytes.NewReader(tarball)
	if _, err := runOutput(cmd); err != nil {
		return "", fmt.Errorf("import image %s into %s: %w", ref, e.Name, err)
	}
	return ref, nil
}

// rootfsTar writes files as a tar stream with fixed times and owners, so the
// same files always give the same bytes (and image tag).
func rootfsTar(files []ImageFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	seen := map[string]bool{}
	var dirs func(p string) error
	dirs = func(p string) error {
		d := path.Dir(p)
		if d == "." || d == "/" || seen[d+"/"] {
			return nil
		}
		if err := dirs(d); err != nil {
			return err
		}
		seen[d+"/"] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch})
	}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if p == "" || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("bad path %q in image", f.Path)
		}
		if err := dirs(p); err != nil {
			return nil, err
		}
		mode := int64(f.Mode.Perm())
		hdr := &tar.Header{Name: p, ModTime: epoch}
		switch {
		case strings.HasSuffix(f.Path, "/"):
			if seen[p+"/"] {
				continue
			}
			seen[p+"/"] = true
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
			if mode == 0 {
				mode = 0o755
			}
			if f.Mode&fs.ModeSticky != 0 {
				mode |= 0o1000
			}
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, mode = tar.TypeSymlink, f.Link, 0o777
		default:
			data := f.Data
			if f.Source != "" {
				b, err := os.ReadFile(f.Source)
				if err != nil {
					return nil, err
				}
				data = b
				if mode == 0 {
					if st, err := os.Stat(f.Source); err == nil {
						mode = int64(st.Mode().Perm())
					}
				}
			}
			if mode == 0 {
				mode = 0o644
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
			hdr.Mode = mode
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
			continue
		}
		hdr.Mode = mode
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ProbeFiles is the root filesystem of the probe's own image: empty but for the
// directories programs expect. The harness and the probe's client are postern
// itself, bind-mounted when the container starts.
func ProbeFiles() []ImageFile {
	return []ImageFile{
		{Path: "etc/"}, {Path: "tmp/", Mode: 0o777 | fs.ModeSticky},
		{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n")},
		{Path: "etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
}
