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

// TestEnvMoreClientsTrustTheBundle (issue 23 item 5): the variables of
// OpenSSL's hashed directory, Nix, gRPC, httplib2 and the Google Cloud SDK
// point at the run's bundle (or its hashed directory), replacing the
// host's values.
func TestEnvMoreClientsTrustTheBundle(t *testing.T) {
	t.Parallel()
	host := []string{"SSL_CERT_DIR=/etc/ssl/certs", "NIX_SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=/x", "HTTPLIB2_CA_CERTS=/y", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE=/z"}
	env, _ := Env(host, false, nil, mustAP("10.0.0.1:3128"), "/run/b.pem", "")
	joined := "\n" + strings.Join(env, "\n") + "\n"
	for _, want := range []string{
		"SSL_CERT_DIR=" + CertDirFor("/run/b.pem"), "NIX_SSL_CERT_FILE=/run/b.pem", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=/run/b.pem",
		"HTTPLIB2_CA_CERTS=/run/b.pem", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE=/run/b.pem",
	} {
		if !strings.Contains(joined, "\n"+want+"\n") {
			t.Errorf("missing %s in\n%s", want, joined)
		}
	}
	for _, h := range host {
		if strings.Contains(joined, "\n"+h+"\n") {
			t.Errorf("the host's %s passed through", h)
		}
	}
}

// TestSubjectHashMatchesOpenSSL: the system's hashed certificate directory
// (made by OpenSSL's c_rehash) names each root by the hash subjectHash
// computes.
func TestSubjectHashMatchesOpenSSL(t *testing.T) {
	t.Parallel()
	dir := "/etc/ssl/certs"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("no hashed certificate directory here: %v", err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if len(name) < 10 || name[8] != '.' || !strings.HasSuffix(name, ".0") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			continue
		}
		h, err := subjectHash(c.RawSubject)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := name[:8]; h != got {
			t.Errorf("%s (%s): subject hash %s, OpenSSL %s", name, c.Subject, h, got)
		}
		n++
	}
	if n == 0 {
		t.Skip("no hashed certificates here")
	}
	t.Logf("%d roots checked", n)
}

// TestCertDirVerifies: OpenSSL, given only the directory, verifies a leaf
// signed by the CA in the bundle (the mixed-case, spaced subject checks
// the canonical form).
func TestCertDirVerifies(t *testing.T) {
	t.Parallel()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "  egressd  Local CA  X1 ", Organization: []string{"Egressd Test"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "repo.example"}, DNSNames: []string{"repo.example"},
		NotBefore: tmpl.NotBefore, NotAfter: tmpl.NotAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "ca-bundle.pem")
	os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	leafFile := filepath.Join(dir, "leaf.pem")
	os.WriteFile(leafFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o644)
	certDir, err := writeCertDir(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if certDir != CertDirFor(bundle) {
		t.Fatalf("cert dir %s, want %s", certDir, CertDirFor(bundle))
	}
	cmd := exec.Command(openssl, "verify", "-no-CAfile", "-no-CAstore", "-CApath", certDir, leafFile)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("openssl verify -CApath %s: %v\n%s", certDir, err, out)
	}
}
