package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tarOf(t testing.TB, hs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Format == 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSnapshotRoundTrip writes a snapshot of a tree with the kinds of
// entries a work tree has and lays it over an empty directory.
func TestSnapshotRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a b.txt"), []byte("spaces"), 0o644))
	must(os.WriteFile(filepath.Join(src, "new\nline"), []byte("newline"), 0o644))
	must(os.WriteFile(filepath.Join(src, "d", "e", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink("../../../outside/secret", filepath.Join(src, "d", "out")))
	paths := []string{"a b.txt", "new\nline", "d/e/run.sh", "d/out", "gone.txt"}
	var b bytes.Buffer
	if _, err := writeSnapshot(src, paths, &b); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	must(os.WriteFile(filepath.Join(dst, "gone.txt"), []byte("old"), 0o644))
	must(applySnapshot(context.Background(), dst, bytes.NewReader(b.Bytes())))
	if got, _ := os.ReadFile(filepath.Join(dst, "new\nline")); string(got) != "newline" {
		t.Errorf("file with a newline: %q", got)
	}
	if st, err := os.Stat(filepath.Join(dst, "d", "e", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("executable: %v %v", st, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "d", "out")); err != nil || l != "../../../outside/secret" {
		t.Errorf("link: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "gone.txt")); !os.IsNotExist(err) {
		t.Errorf("deleted file is still there: %v", err)
	}
}

// TestSnapshotRefusesEscapes: names outside the tree, into .git, through a
// link, or of other types are refused and write nothing outside.
func TestSnapshotRefusesEscapes(t *testing.T) {
	for name, hs := range map[string][]*tar.Header{
		"dotdot":     {{Name: "../x", Typeflag: tar.TypeReg, Size: 1}},
		"absolute":   {{Name: "/tmp/x", Typeflag: tar.TypeReg, Size: 1}},
		"unclean":    {{Name: "a/../../x", Typeflag: tar.TypeReg, Size: 1}},
		"git":        {{Name: ".git/hooks/post-checkout", Typeflag: tar.TypeReg, Size: 1}},
		"git nested": {{Name: "a/.GIT/config", Typeflag: tar.TypeReg, Size: 1}},
		"hardlink":   {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}},
		"device":     {{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}},
		"empty name": {{Name: "", Typeflag: tar.TypeReg}},
		"empty link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ""}},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			err := applySnapshot(context.Background(), filepath.Join(root, "tree"), bytes.NewReader(tarOf(t, hs...)))
			if err == nil {
				t.Fatalf("applied %v", hs[0].Name)
			}
		})
	}
	// A link in the tree, then a file beneath its name: the link is
	// replaced by a directory, nothing is written where it points.
	root := t.TempDir()
	outside := t.TempDir()
	tree := filepath.Join(root, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	b := tarOf(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
		&tar.Header{Name: "l/f", Typeflag: tar.TypeReg, Size: 3},
		&tar.Header{Name: "m", Typeflag: tar.TypeSymlink, Linkname: outside},
		&tar.Header{Name: "m/victim", Typeflag: tar.TypeReg, PAXRecords: map[string]string{paxDeleted: "1"}})
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applySnapshot(context.Background(), tree, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 || ents[0].Name() != "victim" {
		t.Fatalf("the snapshot wrote or removed through a link: %v", ents)
	}
}

// FuzzApplySnapshot: whatever the bytes, nothing is written outside the
// tree and nothing panics.
func FuzzApplySnapshot(f *testing.F) {
	f.Add(tarOf(f, &tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 2}))
	f.Add(tarOf(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, &tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(tarOf(f, &tar.Header{Name: "d/x", Typeflag: tar.TypeReg, PAXRecords: map[string]string{paxDeleted: "1"}}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		tree := filepath.Join(root, "tree")
		if err := os.Mkdir(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		canary := filepath.Join(root, "canary")
		if err := os.WriteFile(canary, []byte("c"), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = applySnapshot(context.Background(), tree, bytes.NewReader(b))
		ents, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "tree" && e.Name() != "canary" {
				t.Fatalf("the snapshot made %q outside the tree", e.Name())
			}
		}
		if got, err := os.ReadFile(canary); err != nil || string(got) != "c" {
			t.Fatalf("the canary beside the tree changed: %q %v", got, err)
		}
		if _, err := os.Lstat(filepath.Join(tree, ".git")); err == nil {
			t.Fatal("the snapshot wrote .git")
		}
	})
}

func TestParseBundleHeader(t *testing.T) {
	sha := strings.Repeat("ab", 20)
	h, err := ParseBundleHeader(strings.NewReader("# v2 git bundle\n-" + sha + " base\n" + sha + " refs/postern/result\n\nPACK"))
	if err != nil || len(h.Refs) != 1 || h.Refs[0].Name != "refs/postern/result" || len(h.Prerequisites) != 1 {
		t.Fatalf("%+v %v", h, err)
	}
	for _, bad := range []string{"", "# v9 git bundle\n", "# v2 git bundle\n" + sha + "\n\n", "# v2 git bundle\n@object-format=sha1\n\n", "# v2 git bundle\nzz refs/x\n\n", "# v2 git bundle\n" + sha + " refs/x", "# v3 git bundle\n@filter=blob:none\n" + sha + " refs/postern/result\n\n"} {
		if _, err := ParseBundleHeader(strings.NewReader(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func FuzzParseBundleHeader(f *testing.F) {
	sha := strings.Repeat("ab", 20)
	f.Add([]byte("# v2 git bundle\n-" + sha + " base\n" + sha + " refs/postern/result\n\nPACK"))
	f.Add([]byte("# v3 git bundle\n@object-format=sha1\n" + sha + " HEAD\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseBundleHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range h.Refs {
			if !validSHA(r.SHA) || r.Name == "" || strings.ContainsAny(r.Name, " \x00\n") {
				t.Fatalf("accepted ref %+v", r)
			}
		}
		for _, p := range h.Prerequisites {
			if !validSHA(p) {
				t.Fatalf("accepted prerequisite %q", p)
			}
		}
	})
}

// A machine without git is told what to install.
func TestInspectWithoutGit(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Inspect(context.Background(), Places{Cache: t.TempDir(), Runs: t.TempDir()}, "")
	if err == nil || !strings.Contains(err.Error(), "install git") || !strings.Contains(err.Error(), "--workspace none") {
		t.Fatalf("Inspect without git: %v", err)
	}
}
