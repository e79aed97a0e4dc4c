package sshclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"

	"github.com/postern-dev/postern/machine"
)

// Options say where the ssh configuration lives and how strict to be.
type Options struct {
	// Home is the directory holding .ssh; "" is the user's home.
	Home string
	// ConfigFile is the ssh config; "" is Home/.ssh/config.
	ConfigFile string
	// KnownHostsFile is where host keys are checked (and, with TrustNewHostKey,
	// added); "" is UserKnownHostsFile from the config, else Home/.ssh/known_hosts.
	KnownHostsFile string
	// TrustNewHostKey accepts and records the key of a host known_hosts does not
	// name yet (trust on first use). A changed key is never accepted.
	TrustNewHostKey bool
	// Identity is a private key file tried before the configuration's.
	Identity string
	// ConnectTimeout bounds each TCP connect and ssh handshake. Zero takes
	// the host's ConnectTimeout from the ssh config, else 15s; set, it wins
	// over the config, as ssh -o ConnectTimeout does.
	ConnectTimeout time.Duration
	Logger         *slog.Logger
}

// Client is a connected ssh client, through any jump hosts. Close closes the
// whole chain.
type Client struct {
	*ssh.Client
	// Target is the resolved host this client is connected to.
	Target machine.SSHHost

	chain     []*ssh.Client // jump hosts, outermost first
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Close ends the connection and every jump connection under it. It is idempotent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.stop)
		err = c.Client.Close()
		for i := len(c.chain) - 1; i >= 0; i-- {
			_ = c.chain[i].Close()
		}
		c.wg.Wait()
	})
	return err
}

// Dial connects to dest ([user@]host[:port] or a config alias) the way OpenSSH
// would: the config's HostName, User, Port, IdentityFile, IdentitiesOnly and
// ProxyJump; keys from the ssh agent and identity files; known_hosts enforced.
func Dial(ctx context.Context, dest string, opts Options) (*Client, error) {
	d, err := machine.ParseDest(dest)
	if err != nil {
		return nil, err
	}
	if opts.Home == "" {
		if opts.Home, err = os.UserHomeDir(); err != nil {
			return nil, fmt.Errorf("find home for ~/.ssh: %w", err)
		}
	}
	if opts.ConfigFile == "" {
		opts.ConfigFile = filepath.Join(opts.Home, ".ssh", "config")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := machine.LoadSSHConfig(opts.ConfigFile, filepath.Join(opts.Home, ".ssh"))
	if err != nil {
		return nil, err
	}
	dl := &dialer{opts: opts, cfg: cfg}
	if dl.agent, dl.agentConn, err = agentSigners(); err != nil {
		opts.Logger.Warn("ssh agent unavailable", "err", err)
	}
	if dl.agentConn != nil {
		defer dl.agentConn.Close()
	}
	return dl.dial(ctx, d, 0)
}

// defaultConnectTimeout bounds a connect and handshake when neither the
// caller nor the ssh config says.
const defaultConnectTimeout = 15 * time.Second

// timeout is how long a connect and handshake to h may take.
func (dl *dialer) timeout(h machine.SSHHost) time.Duration {
	switch {
	case dl.opts.ConnectTimeout > 0:
		return dl.opts.ConnectTimeout
	case h.ConnectTimeout > 0:
		return time.Duration(h.ConnectTimeout) * time.Second
	}
	return defaultConnectTimeout
}

type dialer struct {
	opts      Options
	cfg       *machine.SSHConfig
	agent     []ssh.Signer
	agentConn io.Closer
}

// maxJumps bounds ProxyJump chains (and catches loops).
const maxJumps = 8

func (dl *dialer) resolve(d machine.Dest) machine.SSHHost {
	h := dl.cfg.Lookup(d.Host)
	if d.User != "" {
		h.User = d.User
	}
	if d.Port != 0 {
		h.Port = d.Port
	}
	if h.Port == 0 {
		h.Port = 22
	}
	if h.User == "" {
		h.User = localUser()
	}
	return h
}

func (dl *dialer) dial(ctx context.Context, d machine.Dest, depth int) (*Client, error) {
	if depth > maxJumps {
		return nil, fmt.Errorf("ProxyJump chain to %s is longer than %d hops (a loop in ~/.ssh/config?)", d, maxJumps)
	}
	h := dl.resolve(d)
	addr := net.JoinHostPort(h.HostName, strconv.Itoa(h.Port))
	conf, err := dl.clientConfig(h, addr)
	if err != nil {
		return nil, err
	}

	var chain []*ssh.Client
	var conn net.Conn
	if h.ProxyJump != "" && !strings.EqualFold(h.ProxyJump, "none") {
		// ssh -J a,b,c: connect to a, through it to b, through b to c, then to the target.
		var via *ssh.Client
		for _, hop := range strings.Split(h.ProxyJump, ",") {
			hd, err := machine.ParseDest(strings.TrimSpace(hop))
			if err != nil {
				closeAll(chain)
				return nil, fmt.Errorf("ProxyJump of %s: %w", d, err)
			}
			var jc *Client
			if via == nil {
				jc, err = dl.dial(ctx, hd, depth+1)
			} else {
				jc, err = dl.dialVia(ctx, via, hd)
			}
			if err != nil {
				closeAll(chain)
				return nil, fmt.Errorf("jump host %s for %s: %w", hd, d, err)
			}
			chain = append(chain, jc.chain...)
			chain = append(chain, jc.Client)
			via = jc.Client
		}
		dctx, cancel := context.WithTimeout(ctx, dl.timeout(h))
		conn, err = via.DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			closeAll(chain)
			return nil, fmt.Errorf("connect to %s through jump host %s: %w", addr, h.ProxyJump, err)
		}
	} else if h.ProxyCommand != "" && !strings.EqualFold(h.ProxyCommand, "none") {
		pc, err := dialProxyCommand(h.Expand(h.ProxyCommand, localUser(), dl.opts.Home), addr)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", d, err)
		}
		c, err := dl.handshake(ctx, pc, addr, conf)
		if err != nil {
			var hk *HostKeyError
			if !errors.As(err, &hk) {
				err = pc.failure(err)
			}
			return nil, fmt.Errorf("ssh to %s (%s): %w", d, addr, err)
		}
		return dl.client(c, h, nil), nil
	} else {
		nd := net.Dialer{Timeout: dl.timeout(h), KeepAlive: 30 * time.Second}
		conn, err = nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("connect to %s (%s): %w", d, addr, err)
		}
	}
	c, err := dl.handshake(ctx, conn, addr, conf)
	if err != nil {
		closeAll(chain)
		return nil, fmt.Errorf("ssh to %s (%s): %w", d, addr, err)
	}
	return dl.client(c, h, chain), nil
}

// client starts the keepalives of an ssh connection to h, reached through
// chain (jump hosts, closed with it).
func (dl *dialer) client(c *ssh.Client, h machine.SSHHost, chain []*ssh.Client) *Client {
	sc := &Client{Client: c, Target: h, chain: chain, stop: make(chan struct{})}
	interval := time.Duration(h.ServerAliveInterval) * time.Second
	if interval <= 0 {
		interval = 15 * time.Second
	}
	sc.wg.Add(1)
	go sc.keepalive(interval)
	return sc
}

// dialVia reaches a jump host through the previous one.
func (dl *dialer) dialVia(ctx context.Context, via *ssh.Client, d machine.Dest) (*Client, error) {
	h := dl.resolve(d)
	addr := net.JoinHostPort(h.HostName, strconv.Itoa(h.Port))
	conf, err := dl.clientConfig(h, addr)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, dl.timeout(h))
	conn, err := via.DialContext(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	c, err := dl.handshake(ctx, conn, addr, conf)
	if err != nil {
		return nil, err
	}
	return &Client{Client: c, Target: h, stop: make(chan struct{})}, nil
}

func (dl *dialer) handshake(ctx context.Context, conn net.Conn, addr string, conf *ssh.ClientConfig) (*ssh.Client, error) {
	deadline := time.Now().Add(conf.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, conf)
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

func (dl *dialer) clientConfig(h machine.SSHHost, addr string) (*ssh.ClientConfig, error) {
	home := dl.opts.Home
	known := dl.opts.KnownHostsFile
	if known == "" && len(h.UserKnownHostsFiles) > 0 {
		known = h.Expand(h.UserKnownHostsFiles[0], localUser(), home)
	}
	if known == "" {
		known = filepath.Join(home, ".ssh", "known_hosts")
	}
	hk, err := newHostKeys(known, dl.opts.TrustNewHostKey)
	if err != nil {
		return nil, err
	}
	signers, err := dl.signers(h)
	if err != nil {
		return nil, err
	}
	if len(signers) == 0 {
		return nil, fmt.Errorf("no ssh key to log in to %s with: start ssh-agent and 'ssh-add' a key, give --identity FILE, or set IdentityFile in ~/.ssh/config", h.Alias)
	}
	// known_hosts knows the host as HostKeyAlias when it is set, as ssh does.
	keyHost := addr
	if h.HostKeyAlias != "" {
		keyHost = net.JoinHostPort(h.HostKeyAlias, strconv.Itoa(h.Port))
	}
	return &ssh.ClientConfig{
		User: h.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		HostKeyCallback: func(_ string, remote net.Addr, key ssh.PublicKey) error {
			return hk.callback(keyHost, remote, key)
		},
		HostKeyAlgorithms: hk.algorithms(keyHost),
		Timeout:           dl.timeout(h),
		ClientVersion:     "SSH-2.0-postern",
	}, nil
}

// certSigners are s with each certificate of its key: those CertificateFile
// names and the one beside the identity file (FILE-cert.pub), as ssh loads
// them. A certificate for another key is skipped.
func certSigners(s ssh.Signer, file string, h machine.SSHHost, home string) ([]ssh.Signer, error) {
	paths := []string{file + "-cert.pub"}
	for _, c := range h.CertificateFiles {
		paths = append(paths, h.Expand(c, localUser(), home))
	}
	var out []ssh.Signer
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			if os.IsNotExist(err) && p == file+"-cert.pub" {
				continue
			}
			return nil, fmt.Errorf("read certificate %s: %w", p, err)
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %s: %w", p, err)
		}
		cert, ok := pub.(*ssh.Certificate)
		if !ok {
			return nil, fmt.Errorf("%s is not a certificate", p)
		}
		if !bytes.Equal(cert.Key.Marshal(), s.PublicKey().Marshal()) {
			continue
		}
		cs, err := ssh.NewCertSigner(cert, s)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", p, err)
		}
		out = append(out, cs)
	}
	return out, nil
}

// signers are the keys offered to h: --identity, then IdentityFile (or the
// default files), each after its certificates, then the agent's keys unless
// IdentitiesOnly.
func (dl *dialer) signers(h machine.SSHHost) ([]ssh.Signer, error) {
	home := dl.opts.Home
	var files []string
	if dl.opts.Identity != "" {
		files = append(files, machine.ExpandHome(dl.opts.Identity, home))
	}
	explicit := len(h.IdentityFiles) > 0
	for _, f := range h.IdentityFiles {
		files = append(files, h.Expand(f, localUser(), home))
	}
	if !explicit {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			files = append(files, filepath.Join(home, ".ssh", n))
		}
	}
	var out []ssh.Signer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) && (!explicit || f != dl.opts.Identity) {
				continue
			}
			return nil, fmt.Errorf("read identity %s: %w", f, err)
		}
		s, err := ssh.ParsePrivateKey(b)
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			dl.opts.Logger.Warn("identity is protected by a passphrase; load it into ssh-agent with ssh-add", "file", f)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parse identity %s: %w", f, err)
		}
		cs, err := certSigners(s, f, h, home)
		if err != nil {
			return nil, err
		}
		out = append(append(out, cs...), s)
	}
	if !(h.IdentitiesOnly && len(out) > 0) {
		out = append(out, dl.agent...)
	}
	return out, nil
}

// agentSigners are the keys of the ssh agent at SSH_AUTH_SOCK, if any.
// The signers sign over the returned connection: close it once logged in.
func agentSigners() ([]ssh.Signer, io.Closer, error) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, nil, nil
	}
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to ssh agent %s: %w", sock, err)
	}
	signers, err := sshagent.NewClient(conn).Signers()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("list ssh agent keys: %w", err)
	}
	return signers, conn, nil
}

func (c *Client) keepalive(interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			res := make(chan error, 1)
			go func() {
				_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
				res <- err
			}()
			select {
			case err := <-res:
				if err != nil {
					return
				}
				missed = 0
			case <-time.After(interval):
				missed++
				if missed >= 3 {
					_ = c.Client.Close()
					return
				}
			case <-c.stop:
				return
			}
		}
	}
}

func closeAll(cs []*ssh.Client) {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].Close()
	}
}

func localUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
