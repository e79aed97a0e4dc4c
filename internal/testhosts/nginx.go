//go:build linux

package testhosts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// URL paths of an nginx server's locations besides "/".
const (
	// NginxGzipPath serves the same files as "/" with gzip on for every type
	// and size: /gz/a.bin is /a.bin compressed for clients that accept gzip.
	NginxGzipPath = "/gz/"
	// NginxSmartGitPath serves the bare repositories under NginxOptions.GitRoot
	// over git's smart HTTP protocol (git http-backend through fcgiwrap):
	// /smart/x.git is GitRoot/x.git.
	NginxSmartGitPath = "/smart/"
)

// NginxOptions says what ServeNginx serves.
type NginxOptions struct {
	// Root is the directory served at "/" (and compressed at NginxGzipPath).
	Root string
	// Port is the TCP port on the host's address; 0 picks a free one.
	Port int
	// GitRoot, if set, is a directory of bare git repositories served over
	// smart HTTP at NginxSmartGitPath. The same repositories can be served
	// over dumb HTTP as static files if they are under Root too.
	GitRoot string
	// Addr is the address it listens on, one the host holds; the zero value
	// is the host's own address (Host.Addr), another is one of its links'.
	Addr netip.Addr
	// TLSNames, if set, makes it serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN)
	// with a certificate from the lab's CA for these names and the listen
	// address; the Server's URL is then https:// and its CAFile the lab's.
	TLSNames []string
}

// ServeNginx runs Debian's nginx inside the host's namespace, serving
// opts.Root as static files the way nginx does by default: sendfile, ETag and
// Last-Modified (so If-None-Match and If-Modified-Since answer 304), byte
// ranges, HEAD, and keep-alive for many requests per connection. Everything is
// uncompressed at "/"; NginxGzipPath compresses. With opts.GitRoot it also
// runs fcgiwrap for git http-backend. Its configuration, logs, pid and
// temporary files are in a private directory under the lab's.
//
// ctx bounds the start: ServeNginx returns once the port accepts. The server
// runs until Close (or the host's), which stops its processes with SIGTERM,
// then SIGKILL, and waits for them.
func (h *Host) ServeNginx(ctx context.Context, opts NginxOptions) (*Server, error) {
	if opts.Root == "" {
		return nil, fmt.Errorf("serve nginx on %s: NginxOptions.Root is empty: give the directory to serve", h.Name)
	}
	nginx, err := lookTool("nginx", "nginx")
	if err != nil {
		return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
	}
	dir, err := h.serverDir("nginx")
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"tmp", "logs"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
	}

	var procs []*process
	stopAll := func() error {
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			errs = append(errs, procs[i].stop(5*time.Second))
		}
		return errors.Join(errs...)
	}

	conf := nginxConf{Dir: dir, Root: root}
	if len(opts.TLSNames) > 0 {
		listen := h.Addr
		if opts.Addr.IsValid() {
			listen = opts.Addr
		}
		if conf.Cert, conf.Key, err = h.lab.ca.writeLeaf(dir, opts.TLSNames, []netip.Addr{listen}); err != nil {
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
	}
	if opts.GitRoot != "" {
		fcgi, err := lookTool("fcgiwrap", "fcgiwrap")
		if err != nil {
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
		backend, err := gitHTTPBackend(ctx)
		if err != nil {
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
		if conf.GitRoot, err = filepath.Abs(opts.GitRoot); err != nil {
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
		conf.Backend = backend
		conf.Socket = filepath.Join(dir, "fcgiwrap.sock")
		p, err := h.startProcess(dir, "fcgiwrap", baseEnv(), fcgi, "-c", "4", "-s", "unix:"+conf.Socket)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := waitPath(ctx, p, conf.Socket); err != nil {
			stopAll()
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
	}

	for try := 0; ; try++ {
		conf.Port = opts.Port
		if conf.Port == 0 {
			if conf.Port, err = h.freePort(ctx); err != nil {
				stopAll()
				return nil, err
			}
		}
		listen := h.Addr
		if opts.Addr.IsValid() {
			listen = opts.Addr
		}
		conf.Addr = listen.String()
		confPath := filepath.Join(dir, "nginx.conf")
		var b strings.Builder
		if err := nginxTemplate.Execute(&b, conf); err != nil {
			stopAll()
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
		if err := os.WriteFile(confPath, []byte(b.String()), 0o644); err != nil {
			stopAll()
			return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
		}
		// -e: the error log nginx opens before it has read the configuration.
		p, err := h.startProcess(dir, fmt.Sprintf("nginx-%d", try), baseEnv(), nginx,
			"-e", filepath.Join(dir, "logs", "error.log"), "-p", dir+"/", "-c", confPath)
		if err != nil {
			stopAll()
			return nil, err
		}
		addr := addrPortFrom(listen, conf.Port)
		err = h.waitAccepting(ctx, p, addr)
		if err == nil {
			procs = append(procs, p)
			s := &Server{Addr: addr, URL: "http://" + addr.String() + "/", stop: stopAll}
			if conf.Cert != "" {
				s.URL, s.CAFile = "https://"+addr.String()+"/", h.lab.ca.file
			}
			if err := h.own(s); err != nil {
				return nil, err
			}
			return s, nil
		}
		_ = p.stop(5 * time.Second)
		if opts.Port == 0 && try < 3 && strings.Contains(err.Error(), "Address already in use") {
			continue
		}
		stopAll()
		return nil, fmt.Errorf("serve nginx on %s: %w", h.Name, err)
	}
}

// gitHTTPBackend finds git's http-backend program.
func gitHTTPBackend(ctx context.Context) (string, error) {
	git, err := lookTool("git", "git")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, git, "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", errors.Join(fmt.Errorf("%w: git http-backend not at %s (apt-get install git)", ErrMissingTool, p), err)
	}
	return p, nil
}

type nginxConf struct {
	Dir, Root, Addr string
	Port            int
	GitRoot         string
	Backend, Socket string
	Cert, Key       string // TLS, when set
}

// The master runs as root in the host's namespace and so do its workers
// ("user root"): the lab's directories are private to root.
var nginxTemplate = template.Must(template.New("nginx.conf").Parse(`# Written by testhosts.ServeNginx.
daemon off;
master_process on;
worker_processes 1;
user root;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/logs/error.log info;

events {
	worker_connections 1024;
}

http {
	access_log {{.Dir}}/logs/access.log;
	client_body_temp_path {{.Dir}}/tmp/body;
	proxy_temp_path {{.Dir}}/tmp/proxy;
	fastcgi_temp_path {{.Dir}}/tmp/fastcgi;
	uwsgi_temp_path {{.Dir}}/tmp/uwsgi;
	scgi_temp_path {{.Dir}}/tmp/scgi;

	sendfile on;
	keepalive_timeout 60s;
	keepalive_requests 100000;
	etag on;
	server_tokens off;
	client_max_body_size 0;

	types {
		text/html html htm;
		text/plain txt;
		application/json json;
		application/gzip gz tgz;
		application/zip zip whl;
		application/vnd.debian.binary-package deb;
	}
	default_type application/octet-stream;

	server {
		listen {{.Addr}}:{{.Port}}{{if .Cert}} ssl http2{{end}};
		server_name _;
{{- if .Cert}}
		ssl_certificate "{{.Cert}}";
		ssl_certificate_key "{{.Key}}";
		ssl_protocols TLSv1.2 TLSv1.3;
{{- end}}
		root "{{.Root}}";
		index index.html;
		gzip off;

		location / {
		}

		location /gz/ {
			alias "{{.Root}}/";
			gzip on;
			gzip_types *;
			gzip_min_length 0;
			gzip_proxied any;
			gzip_http_version 1.0;
			gzip_vary on;
		}
{{- if .GitRoot}}

		location ~ ^/smart(/.*)$ {
			fastcgi_pass unix:{{.Socket}};
			fastcgi_param SCRIPT_FILENAME {{.Backend}};
			fastcgi_param GIT_PROJECT_ROOT "{{.GitRoot}}";
			fastcgi_param GIT_HTTP_EXPORT_ALL "";
			fastcgi_param PATH_INFO $1;
			fastcgi_param QUERY_STRING $query_string;
			fastcgi_param REQUEST_METHOD $request_method;
			fastcgi_param CONTENT_TYPE $content_type;
			fastcgi_param CONTENT_LENGTH $content_length;
			fastcgi_param REQUEST_URI $request_uri;
			fastcgi_param SERVER_PROTOCOL $server_protocol;
			fastcgi_param REMOTE_ADDR $remote_addr;
			fastcgi_param SERVER_NAME $server_name;
			fastcgi_param SERVER_PORT $server_port;
			fastcgi_param GATEWAY_INTERFACE CGI/1.1;
		}
{{- end}}
	}
}
`))
