//go:build !postern_wallinit

package netwall

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"software.sslmate.com/src/go-pkcs12"
)

// prepareTrust makes the run's trust files for the authority caPEM: the first
// system bundle this machine has, with caPEM appended, in PEM and as a Java
// trust store.
func prepareTrust(caPEM []byte) (*trustFiles, error) {
	extra, err := parseCerts(caPEM)
	if err != nil || len(extra) == 0 {
		return nil, fmt.Errorf("network wall: the authority to trust is not a PEM certificate (%v)", err)
	}
	if st, err := os.Stat("/run"); err != nil || !st.IsDir() {
		return nil, errors.New("network wall: the run's trust files live in its private /run, and this machine has no /run directory")
	}
	var system []byte
	for _, p := range systemBundles {
		if data, err := os.ReadFile(p); err == nil && len(data) > 0 {
			system = data
			break
		}
	}
	bundle := bytes.Clone(system)
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, caPEM...)
	certs, _ := parseCerts(system)
	entries := make([]pkcs12.TrustStoreEntry, 0, len(certs)+len(extra))
	for i, c := range append(certs, extra...) {
		// Aliases must differ: Java keeps one entry per alias.
		entries = append(entries, pkcs12.TrustStoreEntry{Cert: c, FriendlyName: strconv.Itoa(i) + " " + c.Subject.String()})
	}
	java, err := pkcs12.Passwordless.EncodeTrustStoreEntries(entries, "")
	if err != nil {
		return nil, fmt.Errorf("network wall: make the run's Java trust store: %w", err)
	}
	return &trustFiles{CA: bytes.Clone(caPEM), Bundle: bundle, Java: java}, nil
}

// parseCerts reads every CERTIFICATE block of a PEM bundle; blocks that do
// not parse are skipped (a bundle may hold certificates Go rejects).
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	var firstErr error
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out, firstErr
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, c)
	}
}

// addTrust puts spec's trust and hidden files into the init's configuration.
func addTrust(cfg *initConfig, spec Spec) error {
	cfg.Hide = slices.Clone(spec.Hide)
	if len(spec.TrustPEM) == 0 {
		return nil
	}
	t, err := prepareTrust(spec.TrustPEM)
	if err != nil {
		return err
	}
	cfg.Trust = t
	cfg.Env = trustEnv(cfg.Env)
	return nil
}
