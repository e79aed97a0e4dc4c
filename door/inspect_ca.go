package door

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"time"
)

// authorityLifetime is how long a run's authority and its certificates are
// valid. Its key lives only in the memory of the door that made it, so the
// bound matters only to a run that lasts longer.
const authorityLifetime = 30 * 24 * time.Hour

// Authority is the certificate authority of one run: an ECDSA P-256 key that
// exists only in this process's memory, and a certificate that name
// constraints limit to the hosts the policy inspects. It signs, on demand, the
// certificate the door shows a client for an inspected host. Only the run
// trusts it (see netwall.Spec.TrustPEM); nothing outside the run changes.
type Authority struct {
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	hosts []string

	// One key for every leaf: a leaf is only as strong as the authority
	// that signed it, and signing is what a new host costs.
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewAuthority makes a run's authority for the inspected hosts (canonical
// names). Its certificate can vouch for those names and their subdomains
// only, never for an IP address.
func NewAuthority(hosts []string) (*Authority, error) {
	if len(hosts) == 0 {
		return nil, errors.New("an inspection authority needs the hosts it may vouch for")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the run's certificate authority key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the run's certificate key: %w", err)
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("make the run's certificate authority name: %w", err)
	}
	now := time.Now()
	_, all4, _ := net.ParseCIDR("0.0.0.0/0")
	_, all6, _ := net.ParseCIDR("::/0")
	tmpl := &x509.Certificate{
		SerialNumber:                serialNumber(),
		Subject:                     pkix.Name{CommonName: "postern run " + hex.EncodeToString(id), Organization: []string{"postern (this run only)"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(authorityLifetime),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         slices.Clone(hosts),
		ExcludedIPRanges:            []*net.IPNet{all4, all6},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign the run's certificate authority: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("read back the run's certificate authority: %w", err)
	}
	return &Authority{
		cert:    cert,
		key:     key,
		pem:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		hosts:   slices.Clone(hosts),
		leafKey: leafKey,
		leaves:  map[string]*tls.Certificate{},
	}, nil
}

// CertPEM is the authority's certificate, PEM-encoded: what a run trusts.
func (a *Authority) CertPEM() []byte { return slices.Clone(a.pem) }

// Certificate is the authority's certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// leaf returns the certificate for name, signing it the first time.
func (a *Authority) leaf(name string) (*tls.Certificate, error) {
	a.mu.Lock()
	c, ok := a.leaves[name]
	a.mu.Unlock()
	if ok {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign the certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("read back the certificate for %s: %w", name, err)
	}
	c = &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: leaf}
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.leaves[name]; ok {
		return prev, nil // signed meanwhile by another connection
	}
	a.leaves[name] = c
	return c, nil
}

func serialNumber() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n.Add(n, big.NewInt(1))
}
