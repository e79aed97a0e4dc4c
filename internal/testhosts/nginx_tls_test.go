//go:build linux

package testhosts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nginx with TLSNames serves HTTPS with the lab's certificate, HTTP/2 by ALPN.
func TestNginxServesHTTPS(t *testing.T) {
	RequireTool(t, "nginx", "nginx")
	RequireTool(t, "curl", "curl")
	lab := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := lab.Host(ctx, "nginxtls")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(lab.Dir(), "www-tls")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	const seed, n = 43, 100_000
	if err := os.WriteFile(filepath.Join(root, "b.bin"), Body(n, seed), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := h.ServeNginx(ctx, NginxOptions{Root: root, TLSNames: []string{"tls.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.URL, "https://") || srv.CAFile != lab.CAFile() {
		t.Fatalf("URL %q CAFile %q", srv.URL, srv.CAFile)
	}
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--http2", "--cacert", srv.CAFile,
		"--resolve", "tls.test:"+strconv.Itoa(int(srv.Addr.Port()))+":"+srv.Addr.Addr().String(),
		"-o", filepath.Join(lab.Dir(), "got.bin"), "-w", "%{http_code} %{http_version}",
		"https://tls.test:"+strconv.Itoa(int(srv.Addr.Port()))+"/b.bin").CombinedOutput()
	if err != nil || string(out) != "200 2" {
		t.Fatalf("curl --http2: %q %v", out, err)
	}
	if sum, err := fileSHA256(filepath.Join(lab.Dir(), "got.bin")); err != nil || sum != BodySHA256(n, seed) {
		t.Fatalf("body sha256 %s (%v), want %s", sum, err, BodySHA256(n, seed))
	}
}
