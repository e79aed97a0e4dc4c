package sshclient

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ErrHostKey is a host key known_hosts does not vouch for.
var ErrHostKey = errors.New("host key not trusted")

// HostKeyError is a connection refused over its host key: unknown (Known is
// empty) or changed (Known lists what known_hosts holds for the host).
type HostKeyError struct {
	Host        string // host:port as looked up in known_hosts
	File        string // the known_hosts file
	Offered     string // key type and SHA256 fingerprint the server offered
	Known       []string
	KnownAt     []string // file:line of each known key
	HostForFile string   // the host as written in known_hosts ([host]:port when not 22)
}

func (e *HostKeyError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("%v: the host key of %s is unknown: the server offered %s, which %s does not list; "+
			"check that fingerprint with the machine's owner (on the machine: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "+
			"then add it with 'ssh-keyscan %s >> %s', or connect once with --trust-new-host-key to record it",
			ErrHostKey, e.Host, e.Offered, e.File, keyscanArgs(e.Host), e.File)
	}
	return fmt.Sprintf("%v: the HOST KEY of %s HAS CHANGED: the server offered %s, but %s holds %s (%s); "+
		"someone may be intercepting the connection; if the machine's key was changed on purpose, remove the old key with "+
		"'ssh-keygen -R %s -f %s' and add the new one after checking its fingerprint",
		ErrHostKey, e.Host, e.Offered, e.File, strings.Join(e.Known, ", "), strings.Join(e.KnownAt, ", "), e.HostForFile, e.File)
}

func (e *HostKeyError) Unwrap() error { return ErrHostKey }

func keyscanArgs(hostport string) string {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil || p == "22" {
		return h
	}
	return "-p " + p + " " + h
}

// hostKeys checks host keys against one known_hosts file.
type hostKeys struct {
	file  string
	trust bool // record unknown keys

	mu sync.Mutex
	cb ssh.HostKeyCallback // nil when the file does not exist
	// cas are the file:line places of @cert-authority lines. The library
	// lists them among a host's known keys; they are not the host's own.
	cas map[string]bool
}

func newHostKeys(file string, trust bool) (*hostKeys, error) {
	hk := &hostKeys{file: file, trust: trust}
	if err := hk.load(); err != nil {
		return nil, err
	}
	return hk, nil
}

func (hk *hostKeys) load() error {
	cb, err := knownhosts.New(hk.file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			hk.cb = nil
			return nil
		}
		return fmt.Errorf("read known hosts %s: %w", hk.file, err)
	}
	hk.cb = cb
	hk.cas = map[string]bool{}
	if b, err := os.ReadFile(hk.file); err == nil {
		for i, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == "@cert-authority" {
				hk.cas[fmt.Sprintf("%s:%d", hk.file, i+1)] = true
			}
		}
	}
	return nil
}

// own are the keys of want that are the host's own, not certificate
// authorities.
func (hk *hostKeys) own(want []knownhosts.KnownKey) (keys []knownhosts.KnownKey, cas bool) {
	for _, w := range want {
		if hk.cas[fmt.Sprintf("%s:%d", w.Filename, w.Line)] {
			cas = true
			continue
		}
		keys = append(keys, w)
	}
	return keys, cas
}

func (hk *hostKeys) callback(host string, remote net.Addr, key ssh.PublicKey) error {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	var err error
	if hk.cb != nil {
		err = hk.cb(host, remote, key)
		if err == nil {
			return nil
		}
	}
	// A host certificate no @cert-authority line vouches for is judged, as
	// ssh judges it, by the plain key inside: that is what known_hosts may
	// hold, what the owner's fingerprint shows, and what trust on first use
	// records.
	if cert, ok := key.(*ssh.Certificate); ok {
		key = cert.Key
		if hk.cb != nil {
			if err = hk.cb(host, remote, key); err == nil {
				return nil
			}
		}
	}
	var ke *knownhosts.KeyError
	var known []knownhosts.KnownKey
	if errors.As(err, &ke) {
		known, _ = hk.own(ke.Want)
	}
	unknown := hk.cb == nil || (ke != nil && len(known) == 0)
	if !unknown && ke == nil {
		return fmt.Errorf("check host key of %s: %w", host, err)
	}
	herr := &HostKeyError{Host: host, File: hk.file, Offered: key.Type() + " " + ssh.FingerprintSHA256(key), HostForFile: knownhosts.Normalize(host)}
	if !unknown {
		for _, w := range known {
			herr.Known = append(herr.Known, w.Key.Type()+" "+ssh.FingerprintSHA256(w.Key))
			herr.KnownAt = append(herr.KnownAt, fmt.Sprintf("%s:%d", w.Filename, w.Line))
		}
		return herr
	}
	if !hk.trust {
		return herr
	}
	if err := hk.record(host, key); err != nil {
		return fmt.Errorf("record the new host key of %s in %s: %w", host, hk.file, err)
	}
	return nil
}

// record appends host's key to the file (trust on first use).
func (hk *hostKeys) record(host string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(hk.file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(hk.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(host)}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return hk.load()
}

// algorithms are the host key algorithms to ask for, from the keys known_hosts
// holds for addr, so the server presents the key that is on file rather than
// another one it also has. Nil (the library's default order) when none is known.
func (hk *hostKeys) algorithms(addr string) []string {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	if hk.cb == nil {
		return nil
	}
	// Ask about a key no file holds: the answer lists the keys that are held.
	_, probeKey, _ := ed25519.GenerateKey(nil)
	pk, err := ssh.NewPublicKey(probeKey.Public())
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := hk.cb(addr, &net.TCPAddr{IP: net.IPv4zero}, pk); !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	own, cas := hk.own(ke.Want)
	if len(own) == 0 {
		// Only a CA vouches for the host: the library's order, certificates
		// first, then plain keys (which then meet the unknown-key refusal).
		return nil
	}
	if cas {
		// A CA vouches for the host: its certificates first, whatever
		// their key type, as ssh asks.
		for _, a := range certAlgorithms {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, w := range own {
		for _, a := range algorithmsFor(w.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// certAlgorithms are the host certificate algorithms, in the library's order
// of preference.
var certAlgorithms = []string{
	ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
	ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01,
}

func algorithmsFor(keyType string) []string {
	switch keyType {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	default:
		return []string{keyType}
	}
}
