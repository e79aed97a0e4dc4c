package netwall

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"
)

// testCA is a fresh self-signed authority, PEM-encoded.
func testCA(t *testing.T, name string) ([]byte, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), c
}

func systemBundle(t *testing.T) []byte {
	t.Helper()
	for _, p := range systemBundles {
		if data, err := os.ReadFile(p); err == nil && len(data) > 0 {
			return data
		}
	}
	t.Fatalf("this machine has none of %q (apt-get install ca-certificates)", systemBundles)
	return nil
}

func TestPrepareTrust(t *testing.T) {
	caPEM, ca := testCA(t, "run authority "+t.Name())
	tf, err := prepareTrust(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	system := systemBundle(t)
	if !bytes.HasPrefix(tf.Bundle, system) || !bytes.HasSuffix(tf.Bundle, caPEM) || !bytes.Equal(tf.CA, caPEM) {
		t.Errorf("bundle is not the system's with the authority appended (%d bytes, system %d)", len(tf.Bundle), len(system))
	}
	sys, _ := parseCerts(system)
	certs, err := pkcs12.DecodeTrustStore(tf.Java, "")
	if err != nil {
		t.Fatalf("the Java trust store does not decode: %v", err)
	}
	if len(certs) != len(sys)+1 || !slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return c.Equal(ca) }) {
		t.Errorf("Java trust store holds %d certificates (system %d), authority among them: %v", len(certs), len(sys),
			slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return c.Equal(ca) }))
	}
	if _, err := prepareTrust([]byte("not pem")); err == nil {
		t.Error("prepareTrust took something that is not a certificate")
	}
}

func TestTrustEnv(t *testing.T) {
	env := trustEnv([]string{"HOME=/h", "SSL_CERT_FILE=/mine.pem", "JAVA_TOOL_OPTIONS=-Xmx64m", "PATH=/bin"})
	want := []string{"HOME=/h", "PATH=/bin",
		"CURL_CA_BUNDLE=" + trustBundleFile, "GIT_SSL_CAINFO=" + trustBundleFile, "NODE_EXTRA_CA_CERTS=" + trustCAFile,
		"PIP_CERT=" + trustBundleFile, "REQUESTS_CA_BUNDLE=" + trustBundleFile, "SSL_CERT_FILE=" + trustBundleFile,
		"JAVA_TOOL_OPTIONS=-Xmx64m " + javaTrustOptions}
	if !slices.Equal(env, want) {
		t.Errorf("trustEnv =\n%q\nwant\n%q", env, want)
	}
	if env := trustEnv(nil); env[len(env)-1] != "JAVA_TOOL_OPTIONS="+javaTrustOptions {
		t.Errorf("trustEnv(nil) = %q", env)
	}
}

// The run sees the bundle with the authority, the variables, and hidden files
// as empty; the host sees none of it.
func TestWallTrustsOnlyInside(t *testing.T) {
	requireRoot(t)
	caPEM, _ := testCA(t, "run authority "+t.Name())
	// Outside /tmp, which the run gets fresh, so hiding it is what hides it.
	dir, err := os.MkdirTemp("/var/tmp", "postern-trust-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "token")
	const value = "tok-never-inside-0123456789"
	if err := os.WriteFile(secret, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := systemBundle(t)
	bundlePath := ""
	for _, p := range systemBundles {
		if _, err := os.Stat(p); err == nil {
			bundlePath = p
			break
		}
	}
	script := `grep -c "BEGIN CERTIFICATE" ` + bundlePath + `
grep -c "$(sed -n 2p ` + trustCAFile + `)" ` + bundlePath + `
echo "ssl=$SSL_CERT_FILE node=$NODE_EXTRA_CA_CERTS java=$JAVA_TOOL_OPTIONS"
echo "secret=$(cat ` + secret + ` 2>/dev/null | wc -c)"
echo x >> ` + bundlePath + ` 2>/dev/null; echo "write=$?"
sleep 0.3
`
	// A variable of postern's own that the run's environment leaves out
	// must not reach the run's pid 1 either.
	t.Setenv("POSTERN_TEST_NOT_FOR_THE_RUN", value)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "POSTERN_TEST_NOT_FOR_THE_RUN=") })
	var initEnv []byte
	r := runSpec(t, Spec{Command: []string{"sh", "-c", script}, Env: append(env, "JAVA_TOOL_OPTIONS=-Xss1m"), TrustPEM: caPEM, Hide: []string{secret}},
		func(w *Wall) { initEnv, _ = os.ReadFile(fmt.Sprintf("/proc/%d/environ", w.Pid())) })
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 5 {
		t.Fatalf("output %q", r.stdout)
	}
	if n := bytes.Count(before, []byte("BEGIN CERTIFICATE")); lines[0] != strconv.Itoa(n+1) {
		t.Errorf("the run's %s holds %s certificates, want the system's %d and the authority", bundlePath, lines[0], n)
	}
	if lines[1] != "1" {
		t.Errorf("the authority is not in the run's %s: %q", bundlePath, lines[1])
	}
	if want := "ssl=" + trustBundleFile + " node=" + trustCAFile + " java=-Xss1m " + javaTrustOptions; lines[2] != want {
		t.Errorf("variables %q, want %q", lines[2], want)
	}
	if lines[3] != "secret=0" {
		t.Errorf("the hidden file reads %q inside the run", lines[3])
	}
	if lines[4] == "write=0" {
		t.Errorf("the run wrote to %s", bundlePath)
	}
	if !bytes.Contains(initEnv, []byte("SSL_CERT_FILE="+trustBundleFile)) || bytes.Contains(initEnv, []byte(value)) {
		t.Errorf("the run's pid 1 has an environment other than the run's: %q", initEnv)
	}
	if strings.Contains(r.stdout+r.stderr, value) {
		t.Errorf("the hidden value reached the run's output")
	}
	after, _ := os.ReadFile(bundlePath)
	if !bytes.Equal(before, after) {
		t.Errorf("the host's %s changed", bundlePath)
	}
	if data, _ := os.ReadFile(secret); string(data) != value+"\n" {
		t.Errorf("the hidden file changed on the host: %q", data)
	}
	if _, err := os.Stat(trustDir); err == nil {
		t.Errorf("%s exists on the host", trustDir)
	}
}
