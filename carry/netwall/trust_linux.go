package netwall

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
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
	CA     []byte
	Bundle []byte
	Java   []byte
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

// bindReadOnly binds src over dst and makes that mount read-only: the host's
// mounts are sealed before these are made, so a bind of a file from the run's
// own (writable) /run would otherwise be writable where it lands.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}
