package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCert makes a self-signed ECDSA certificate, a CA when isCA is set.
func testCert(t testing.TB, notBefore, notAfter time.Time, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// writePair writes a certificate and key into dir with the modes
// LoadOrCreate uses.
func writePair(t *testing.T, dir string, cert *x509.Certificate, key *ecdsa.PrivateKey) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestLoadOrCreateWritesFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "egressd")
	c, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("LoadOrCreate: %v", err)
	}
	for _, tc := range []struct {
		name string
		path string
		want fs.FileMode
	}{
		{"dir", dir, 0o700},
		{"key", filepath.Join(dir, KeyFile), 0o600},
		{"cert", filepath.Join(dir, CertFile), 0o644},
	} {
		if got := mode(t, tc.path); got != tc.want {
			t.Errorf("%s mode: got %04o, want %04o", tc.name, got, tc.want)
		}
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Errorf("dir holds %d entries (%v), want only %s and %s", len(names), names, CertFile, KeyFile)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, c.CertPEM()) {
		t.Errorf("%s differs from CertPEM()", CertFile)
	}

	cert := c.Certificate()
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key: got %T, want ECDSA P-256", cert.PublicKey)
	}
	if !strings.HasPrefix(cert.Subject.CommonName, "egressd local CA ") || len(cert.Subject.CommonName) <= len("egressd local CA ") {
		t.Errorf("CN: got %q, want \"egressd local CA <suffix>\"", cert.Subject.CommonName)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("basic constraints: got IsCA=%v valid=%v MaxPathLen=%d zero=%v, want CA with path length 0",
			cert.IsCA, cert.BasicConstraintsValid, cert.MaxPathLen, cert.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; cert.KeyUsage != want {
		t.Errorf("key usage: got %b, want %b", cert.KeyUsage, want)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got < 10*365*24*time.Hour || got > 10*366*24*time.Hour {
		t.Errorf("validity: got %v, want about 10 years", got)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
}

func TestLoadOrCreateReloads(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("first LoadOrCreate: %v", err)
	}
	second, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("second LoadOrCreate: %v", err)
	}
	if !bytes.Equal(first.CertPEM(), second.CertPEM()) {
		t.Fatalf("reload gave a different certificate:\n%s\nwant:\n%s", second.CertPEM(), first.CertPEM())
	}
	// The reloaded key must be the one that matches: its leaves chain to
	// the first instance's pool.
	leaf, err := second.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: first.Pool(), DNSName: "allowed.test"}); err != nil {
		t.Errorf("leaf from reloaded CA does not verify against the original: %v", err)
	}
}

func TestLoadNoCA(t *testing.T) {
	_, err := Load(t.TempDir())
	if !errors.Is(err, ErrNoCA) {
		t.Fatalf("Load(empty dir): got %v, want ErrNoCA", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // dir starts with a valid CA
		wantErr []string
	}{
		{
			name:    "group-readable key",
			setup:   func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFile), 0o640) },
			wantErr: []string{KeyFile, "0640", "chmod 600"},
		},
		{
			name:    "other-readable key",
			setup:   func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFile), 0o604) },
			wantErr: []string{KeyFile, "0604", "chmod 600"},
		},
		{
			name:    "group-writable dir",
			setup:   func(t *testing.T, dir string) { chmod(t, dir, 0o770) },
			wantErr: []string{"0770", "writable by group or others", "chmod 700"},
		},
		{
			name:    "cert only",
			setup:   func(t *testing.T, dir string) { remove(t, filepath.Join(dir, KeyFile)) },
			wantErr: []string{"only one of", "remove both"},
		},
		{
			name:    "key only",
			setup:   func(t *testing.T, dir string) { remove(t, filepath.Join(dir, CertFile)) },
			wantErr: []string{"only one of"},
		},
		{
			name: "not a CA",
			setup: func(t *testing.T, dir string) {
				cert, key := testCert(t, now.Add(-time.Hour), now.Add(time.Hour), false)
				writePair(t, dir, cert, key)
			},
			wantErr: []string{CertFile, "not a CA"},
		},
		{
			name: "expired CA",
			setup: func(t *testing.T, dir string) {
				cert, key := testCert(t, now.Add(-48*time.Hour), now.Add(-24*time.Hour), true)
				writePair(t, dir, cert, key)
			},
			wantErr: []string{CertFile, "expired", "generate a new CA"},
		},
		{
			name: "key of another CA",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				if _, err := LoadOrCreate(other); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(other, KeyFile))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, KeyFile), b, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{"private key does not match public key"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreate(dir); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			before := snapshot(t, dir)
			_, err := LoadOrCreate(dir)
			if err == nil {
				t.Fatalf("LoadOrCreate: got nil error, want one containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if after := snapshot(t, dir); after != before {
				t.Errorf("refused state dir was modified:\n got %s\nwant %s", after, before)
			}
		})
	}
}

// snapshot describes the files in dir, to show a refusal changed nothing.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + ":" + string(data) + ";")
	}
	return b.String()
}

func chmod(t *testing.T, path string, m fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, m); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestNewIsInMemoryCA(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.CertPEM(), b.CertPEM()) {
		t.Error("two New CAs share a certificate")
	}
	if a.Certificate().Subject.CommonName == b.Certificate().Subject.CommonName {
		t.Errorf("two New CAs share the name %q; want distinct random suffixes", a.Certificate().Subject.CommonName)
	}
	if err := checkCA(a.Certificate(), time.Now()); err != nil {
		t.Errorf("New CA fails its own load check: %v", err)
	}
	tc := a.TLSCert()
	if len(tc.Certificate) != 1 || !bytes.Equal(tc.Certificate[0], a.Certificate().Raw) || tc.PrivateKey == nil {
		t.Errorf("TLSCert: got %d certificates, key %T; want the CA certificate and its key", len(tc.Certificate), tc.PrivateKey)
	}
}
