//go:build linux

package testhosts

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PythonClosePath is the URL path prefix under which ServePython's server
// answers without Content-Length, ending each body by closing the connection:
// /close/a.bin is the file a.bin.
const PythonClosePath = "/close/"

// pythonServer is the program ServePython runs. Every path but /close/ is
// served by the standard library's SimpleHTTPRequestHandler as it stands
// (HTTP/1.0, Content-Length, one request per connection); /close/ reads the
// same files but sends no Content-Length, so the body ends where the server
// closes the connection.
const pythonServer = `# Written by testhosts.ServePython.
import functools
import http.server
import shutil
import sys

CLOSE = "/close"


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith(CLOSE + "/"):
            return self.send_close_delimited(self.path[len(CLOSE):])
        return super().do_GET()

    def send_close_delimited(self, path):
        fs_path = self.translate_path(path)
        try:
            f = open(fs_path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return
        with f:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            shutil.copyfileobj(f, self.wfile)
        self.close_connection = True


def main():
    addr, port, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    handler = functools.partial(Handler, directory=root)
    with http.server.ThreadingHTTPServer((addr, port), handler) as srv:
        srv.serve_forever()


if __name__ == "__main__":
    main()
`

// ServePython serves root with Python's http.server inside the host's
// namespace on port (0: a free one): HTTP/1.0, a connection per request,
// Content-Length on every file. Under PythonClosePath the same files come
// without Content-Length, delimited by the server closing the connection.
//
// ctx bounds the start: ServePython returns once the port accepts. The server
// runs until Close (or the host's), which stops it with SIGTERM, then SIGKILL,
// and waits for it.
func (h *Host) ServePython(ctx context.Context, root string, port int) (*Server, error) {
	return h.ServePythonAt(ctx, h.Addr, root, port)
}

// ServePythonAt is ServePython listening on addr, an address the host holds
// (its own, or one of its links').
func (h *Host) ServePythonAt(ctx context.Context, addr netip.Addr, root string, port int) (*Server, error) {
	python, err := lookTool("python3", "python3")
	if err != nil {
		return nil, fmt.Errorf("serve python on %s: %w", h.Name, err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("serve python on %s: %w", h.Name, err)
	}
	dir, err := h.serverDir("python")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "server.py")
	if err := os.WriteFile(script, []byte(pythonServer), 0o644); err != nil {
		return nil, fmt.Errorf("serve python on %s: %w", h.Name, err)
	}
	env := append(baseEnv(), "PYTHONDONTWRITEBYTECODE=1")
	for try := 0; ; try++ {
		p := port
		if p == 0 {
			if p, err = h.freePort(ctx); err != nil {
				return nil, err
			}
		}
		// -u: the request log reaches the log file as it is written.
		proc, err := h.startProcess(dir, "python-"+strconv.Itoa(try), env, python, "-u", script, addr.String(), strconv.Itoa(p), root)
		if err != nil {
			return nil, err
		}
		at := addrPortFrom(addr, p)
		err = h.waitAccepting(ctx, proc, at)
		if err == nil {
			s := &Server{Addr: at, URL: "http://" + at.String() + "/", stop: func() error { return proc.stop(5 * time.Second) }}
			if err := h.own(s); err != nil {
				return nil, err
			}
			return s, nil
		}
		_ = proc.stop(5 * time.Second)
		if port == 0 && try < 3 && strings.Contains(err.Error(), "Address already in use") {
			continue
		}
		return nil, fmt.Errorf("serve python on %s: %w", h.Name, err)
	}
}
