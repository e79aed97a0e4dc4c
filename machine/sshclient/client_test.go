package sshclient

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/machine"
	"golang.org/x/crypto/ssh"
)

// TestCertSigners offers an identity's certificate (beside it as FILE-cert.pub,
// or named by CertificateFile) before the key itself, skips a certificate of
// another key, and refuses a CertificateFile that holds no certificate.
func TestCertSigners(t *testing.T) {
	dir := t.TempDir()
	newSigner := func() ssh.Signer {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ca, key, other := newSigner(), newSigner(), newSigner()
	certFor := func(s ssh.Signer, path string) {
		cert := &ssh.Certificate{Key: s.PublicKey(), CertType: ssh.UserCert, KeyId: "test", ValidPrincipals: []string{"root"},
			ValidBefore: ssh.CertTimeInfinity}
		if err := cert.SignCert(rand.Reader, ca); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, ssh.MarshalAuthorizedKey(cert), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	id := filepath.Join(dir, "id")
	certFor(key, id+"-cert.pub")
	certFor(other, filepath.Join(dir, "other-cert.pub"))
	h := machine.SSHHost{CertificateFiles: []string{filepath.Join(dir, "other-cert.pub")}}
	got, err := certSigners(key, id, h, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d certificate signers, want the one for this key", len(got))
	}
	if c, ok := got[0].PublicKey().(*ssh.Certificate); !ok || !bytes.Equal(c.Key.Marshal(), key.PublicKey().Marshal()) {
		t.Fatalf("signer offers %T, want the key's certificate", got[0].PublicKey())
	}
	if got, err := certSigners(key, filepath.Join(dir, "none"), machine.SSHHost{}, dir); err != nil || len(got) != 0 {
		t.Fatalf("no certificate beside the key: %d signers, %v", len(got), err)
	}
	plain := filepath.Join(dir, "plain.pub")
	if err := os.WriteFile(plain, ssh.MarshalAuthorizedKey(key.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := certSigners(key, id, machine.SSHHost{CertificateFiles: []string{plain}}, dir); err == nil || !strings.Contains(err.Error(), "not a certificate") {
		t.Fatalf("a CertificateFile with a plain key: %v", err)
	}
}

func TestConnectTimeoutFromConfigAndFlag(t *testing.T) {
	cfg, err := machine.ParseSSHConfig("config", []byte("Host slow\n  ConnectTimeout 3\nHost *\n  ConnectTimeout 40\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	slow, other := cfg.Lookup("slow"), cfg.Lookup("other")
	if slow.ConnectTimeout != 3 || other.ConnectTimeout != 40 {
		t.Fatalf("ConnectTimeout: slow %d, other %d", slow.ConnectTimeout, other.ConnectTimeout)
	}
	dl := &dialer{}
	if got := dl.timeout(slow); got != 3*time.Second {
		t.Fatalf("from the config: %v", got)
	}
	if got := dl.timeout(machine.SSHHost{}); got != defaultConnectTimeout {
		t.Fatalf("unset: %v", got)
	}
	dl.opts.ConnectTimeout = 500 * time.Millisecond
	if got := dl.timeout(slow); got != 500*time.Millisecond {
		t.Fatalf("the flag over the config: %v", got)
	}
}
