//go:build linux

package benchmark

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
)

// baselineEnv turns the benchmark binary into the baseline proxy: a CONNECT
// proxy in Go with nothing else, no policy, no events, io.Copy both ways
// (which splices). It is what Go's runtime and net package alone cost a proxy
// on the machine, so the door's own share of a row can be read off beside it.
// It serves only CONNECT: it has no keep-alive or idle-tunnel rows.
const baselineEnv = "POSTERN_BENCH_BASELINE_PROXY"

// BaselineRequested reports whether this process was started as the baseline
// proxy. A main that uses Run must check it first and call ServeBaseline.
func BaselineRequested() bool { return os.Getenv(baselineEnv) != "" }

// ServeBaseline listens on a free loopback port, prints "baseline listening
// addr=ADDR" on stdout, and serves CONNECT until stdin closes.
func ServeBaseline() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("baseline proxy: %w", err)
	}
	fmt.Printf("baseline listening addr=%s\n", ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		go serveBaseline(c)
	}
}

func serveBaseline(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	up, err := net.Dial("tcp", req.RequestURI)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		c.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(up, c)
	up.(*net.TCPConn).CloseWrite()
	<-done
}

// baselineName is the baseline's path in reports.
const baselineName = "go baseline (CONNECT, no policy)"

var baselineListening = regexp.MustCompile(`baseline listening addr=(\S+)`)

// startBaseline runs this binary as the baseline proxy.
func startBaseline(ctx context.Context) (*proxyProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), baselineEnv+"=1")
	// Its stdin is a pipe the benchmark never writes: it ends when the
	// benchmark does, and with it the proxy.
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, err
	}
	return startProxy(ctx, "go baseline", cmd, "", baselineListening)
}
