package netwall

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"software.sslmate.com/src/go-pkcs12"
)

// A run that trusts one more certificate authority (the door's, for the hosts
// it inspects) sees it only inside: the files are written to the run's own
// /run, bound over the system bundle's paths in the run's mount namespace, and
// named by the variables clients read. The host's files are not touched.

// trustDir holds the run's trust files, inside the run's private /run.
const trustDir = "/run/postern-trust"

// Files in trustDir.
const (
	trustCAFile     = trustDir + "/ca.pem"         // the added authority alone
	trustBundleFile = trustDir + "/ca-bundle.crt"  // the system's roots and the added one
	trustJavaFile   = trustDir + "/truststore.p12" // the same, as a Java trust store
	hiddenFile      = trustDir + "/.hidden"        // what a hidden file reads as
)

// systemBundles are where the distributions keep the bundle of trusted roots:
// Debian and its kin, RHEL and its kin, Alpine (and the BSDs).
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// trustFiles are the contents of the run's trust files, made outside the run
// and written inside it.
type trustFiles struct {
	CA     []byte `json:"ca"`
	Bundle []byte `json:"bundle"`
	Java   []byte `json:"java"`
}

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

// trustVariables are what clients read a bundle from, each pointing at the
// run's files. JAVA_TOOL_OPTIONS is extended, not replaced.
var trustVariables = map[string]string{
	"SSL_CERT_FILE":       trustBundleFile, // OpenSSL, Go, Python's ssl, Ruby
	"REQUESTS_CA_BUNDLE":  trustBundleFile, // Python requests (certifi otherwise)
	"CURL_CA_BUNDLE":      trustBundleFile,
	"GIT_SSL_CAINFO":      trustBundleFile,
	"PIP_CERT":            trustBundleFile, // pip's vendored certifi otherwise
	"NODE_EXTRA_CA_CERTS": trustCAFile,     // added to Node's own roots
}

const javaTrustOptions = "-Djavax.net.ssl.trustStore=" + trustJavaFile + " -Djavax.net.ssl.trustStoreType=PKCS12"

// trustEnv is env with the trust variables set.
func trustEnv(env []string) []string {
	out := make([]string, 0, len(env)+len(trustVariables)+1)
	java := javaTrustOptions
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := trustVariables[k]; ok {
			continue
		}
		if k == "JAVA_TOOL_OPTIONS" {
			if strings.TrimSpace(v) != "" {
				java = v + " " + javaTrustOptions
			}
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(trustVariables))
	for k := range trustVariables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+trustVariables[k])
	}
	return append(out, "JAVA_TOOL_OPTIONS="+java)
}

// installTrust writes the run's trust files into its private /run and binds
// the bundle over each system bundle path this machine has, inside the run's
// mount namespace only. The wall's seal then makes those mounts read-only.
func installTrust(t *trustFiles) error {
	if t == nil {
		return nil
	}
	if err := os.MkdirAll(trustDir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", trustDir, err)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{trustCAFile, t.CA}, {trustBundleFile, t.Bundle}, {trustJavaFile, t.Java}} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	var bound []string
	for _, p := range systemBundles {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || slices.Contains(bound, real) || underHiddenRoot(real) {
			continue
		}
		if st, err := os.Stat(real); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if err := bindReadOnly(trustBundleFile, real); err != nil {
			return fmt.Errorf("bind the run's bundle over %s: %w", real, err)
		}
		bound = append(bound, real)
	}
	return nil
}

// hidePaths covers each file, inside the run, with an empty one no one may
// open: the files postern
// reads injected header values from, which the run has no business reading.
// A file that does not exist, or lies under a root the run gets fresh, needs
// nothing.
func hidePaths(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(hiddenFile), 0o755); err != nil {
		return fmt.Errorf("hide files: %w", err)
	}
	if err := os.WriteFile(hiddenFile, nil, 0); err != nil {
		return fmt.Errorf("hide files: %w", err)
	}
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || underHiddenRoot(real) {
			continue
		}
		if err := bindReadOnly(hiddenFile, real); err != nil {
			return fmt.Errorf("hide %s: %w", real, err)
		}
	}
	return nil
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

// bindReadOnly binds src over dst and makes that mount read-only: the host's
// mounts are sealed before these are made, so a bind of a file from the run's
// own (writable) /run would otherwise be writable where it lands.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}
