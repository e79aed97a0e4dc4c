package container

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"strings"
	"testing"
)

func TestRootfsTarIsDeterministicAndComplete(t *testing.T) {
	files := []ImageFile{
		{Path: "bin/tool", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "bin/alias", Link: "tool"},
		{Path: "tmp/", Mode: 0o777 | fs.ModeSticky},
		{Path: "/etc/deep/conf", Data: []byte("x=1\n")},
	}
	a, err := rootfsTar(files)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rootfsTar(files)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same files gave different tarballs: the image tag would change every time")
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	want := map[string]byte{"bin/": tar.TypeDir, "bin/tool": tar.TypeReg, "bin/alias": tar.TypeSymlink,
		"tmp/": tar.TypeDir, "etc/": tar.TypeDir, "etc/deep/": tar.TypeDir, "etc/deep/conf": tar.TypeReg}
	for name, typ := range want {
		h, ok := got[name]
		if !ok || h.Typeflag != typ {
			t.Errorf("entry %s: %+v, want type %c", name, h, typ)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want exactly %v", got, want)
	}
	if got["bin/tool"].Mode != 0o755 || got["tmp/"].Mode != 0o1777 || got["etc/deep/conf"].Mode != 0o644 || got["bin/alias"].Linkname != "tool" {
		t.Errorf("modes or link wrong: tool %o tmp %o conf %o alias -> %q", got["bin/tool"].Mode, got["tmp/"].Mode, got["etc/deep/conf"].Mode, got["bin/alias"].Linkname)
	}
}

func TestRootfsTarRejectsEscapes(t *testing.T) {
	for _, p := range []string{"", "/", "."} {
		if _, err := rootfsTar([]ImageFile{{Path: p, Data: []byte("x")}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	// Cleaned under the root: "../x" cannot climb out.
	b, err := rootfsTar([]ImageFile{{Path: "../../x", Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(bytes.NewReader(b)).Next()
	if err != nil || h.Name != "x" {
		t.Fatalf("../../x became %+v, %v; want x at the root", h, err)
	}
}

func TestContainerName(t *testing.T) {
	if got := containerName("20261129-120000-abcdef"); got != "postern-20261129-120000-abcdef" {
		t.Errorf("name %q", got)
	}
	if got := containerName("a b/c"); got != "postern-a-b-c" {
		t.Errorf("name %q", got)
	}
	if got := containerName(""); !strings.HasPrefix(got, "postern-") || len(got) <= len("postern-") {
		t.Errorf("name for no run %q", got)
	}
}

func TestGateHoldsThenPasses(t *testing.T) {
	var dst bytes.Buffer
	g := &gate{dst: &dst}
	g.Write([]byte("engine complaint\n"))
	if dst.Len() != 0 {
		t.Fatal("written through before open")
	}
	g.Write(bytes.Repeat([]byte("x"), gateMax*2))
	if n := len(g.held()); n != gateMax {
		t.Fatalf("held %d bytes, want at most %d", n, gateMax)
	}
	g.open()
	g.open()
	g.Write([]byte("after\n"))
	if !strings.HasPrefix(dst.String(), "engine complaint\n") || !strings.HasSuffix(dst.String(), "after\n") || dst.Len() != gateMax+len("after\n") {
		t.Fatalf("passed %d bytes", dst.Len())
	}
}
