package runbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testCAPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestJKSTrustStoreKeytool: keytool reads the store with the password
// (its digest checks), lists every certificate as a trusted entry, and
// refuses it with another password or one flipped byte.
func TestJKSTrustStoreKeytool(t *testing.T) {
	t.Parallel()
	keytool, err := exec.LookPath("keytool")
	if err != nil {
		t.Skip("keytool is not installed")
	}
	bundle := append(testCAPEM(t, "root one"), []byte("junk\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")...)
	bundle = append(bundle, testCAPEM(t, "egressd test CA")...)
	dir := t.TempDir()
	bf := filepath.Join(dir, "bundle.pem")
	os.WriteFile(bf, bundle, 0o644)
	store, err := writeJavaTrustStore(filepath.Join(dir, "trust.jks"), bf)
	if err != nil {
		t.Fatal(err)
	}
	list := func(path, pass string) (string, error) {
		out, err := exec.Command(keytool, "-list", "-v", "-keystore", path, "-storetype", "JKS", "-storepass", pass).CombinedOutput()
		return string(out), err
	}
	out, err := list(store, TrustStorePassword)
	if err != nil {
		t.Fatalf("keytool -list: %v\n%s", err, out)
	}
	for _, want := range []string{"contains 2 entries", "trustedCertEntry", "CN=root one", "CN=egressd test CA"} {
		if !strings.Contains(out, want) {
			t.Errorf("keytool output lacks %q:\n%s", want, out)
		}
	}
	if out, err := list(store, "wrong-password"); err == nil {
		t.Errorf("keytool accepted a wrong password:\n%s", out)
	}
	b, _ := os.ReadFile(store)
	b[len(b)/2] ^= 1
	bad := filepath.Join(dir, "bad.jks")
	os.WriteFile(bad, b, 0o644)
	if out, err := list(bad, TrustStorePassword); err == nil {
		t.Errorf("keytool accepted a corrupted store:\n%s", out)
	}
}

func TestJKSTrustStoreEmpty(t *testing.T) {
	t.Parallel()
	if _, err := jksTrustStore([]byte("no certs here"), TrustStorePassword, time.Now()); err == nil {
		t.Error("a bundle without certificates gave a trust store")
	}
}
