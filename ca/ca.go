// Package ca is egressd's own certificate authority for TLS inspection.
//
// When a rule needs to see method, path or page type inside a CONNECT
// tunnel, the proxy terminates the client's TLS with a leaf certificate
// issued here and re-encrypts upstream with verification on. The CA is
// generated on first start in the state directory (ECDSA P-256, key file
// 0600) and is never goproxy's built-in CA, whose key is public. Leaves are
// short-lived ECDSA P-256 certificates, cached per host so that only the
// first inspected CONNECT to a host pays for key generation and signing.
//
// Usage sketch (the proxy wires the config into goproxy; this package does
// not import goproxy):
//
//	authority, err := ca.LoadOrCreate(stateDir) // or ca.New() for an ephemeral CA
//	if err != nil {
//		return err
//	}
//	os.Stdout.Write(authority.CertPEM()) // `egressd ca export`
//
//	mitm := &goproxy.ConnectAction{
//		Action: goproxy.ConnectMitm,
//		TLSConfig: func(host string, _ *goproxy.ProxyCtx) (*tls.Config, error) {
//			return authority.ServerConfig(host) // host may carry a port
//		},
//	}
//
// Sandboxed clients trust CertPEM (or Pool, in tests); nothing else should.
package ca

import (
	"crypto"
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
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names inside the state directory.
const (
	CertFile = "ca.pem"     // the CA certificate, PEM, mode 0644
	KeyFile  = "ca-key.pem" // the CA private key, PKCS#8 PEM, mode 0600
)

const (
	caValidity = 10 * 365 * 24 * time.Hour
	// backdate absorbs clock skew between egressd and its clients.
	backdate = time.Hour
	// maxFileSize bounds what is read from the state directory.
	maxFileSize = 1 << 20
)

// ErrNoCA means the state directory holds neither CertFile nor KeyFile.
var ErrNoCA = errors.New("no CA in state directory")

// CA is a certificate authority that issues and caches TLS leaf
// certificates. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte

	// Test seams: now is the clock; beforeIssue, when set, runs before
	// each leaf is generated (Leaf or Fetch), outside the lock.
	now         func() time.Time
	beforeIssue func(key string)

	mu       sync.RWMutex
	entries  map[string]*entry // guarded by mu
	ring     []string          // guarded by mu; cache slots for CLOCK eviction
	hand     int               // guarded by mu
	capacity int
	inflight map[string]*call // guarded by mu
}

// New returns an in-memory CA with a fresh key, for tests and for
// ephemeral use (`egressd run`). Nothing is written to disk.
func New() (*CA, error) {
	cert, key, err := generate(time.Now())
	if err != nil {
		return nil, err
	}
	return newCA(cert, key), nil
}

// Load reads the CA from dir/CertFile and dir/KeyFile. It refuses a key file
// that group or others may access, a directory that group or others may
// write, a certificate that is not a CA or is outside its validity, and a
// key that does not match the certificate. If neither file exists the error
// wraps ErrNoCA.
func Load(dir string) (*CA, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	certPEM, certErr := readFile(certPath)
	keyPEM, keyErr := readKey(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("load CA from %s: %w", dir, ErrNoCA)
	case errors.Is(certErr, fs.ErrNotExist) != errors.Is(keyErr, fs.ErrNotExist):
		// Never generate over half a CA: the other half may be the one
		// clients already trust, or a key an operator put there.
		return nil, fmt.Errorf("load CA from %s: found only one of %s and %s; restore the other or remove both to generate a new CA",
			dir, CertFile, KeyFile)
	case certErr != nil:
		return nil, fmt.Errorf("load CA: %w", certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("load CA: %w", keyErr)
	}

	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %s with %s: %w", certPath, keyPath, err)
	}
	if len(pair.Certificate) != 1 {
		return nil, fmt.Errorf("load CA: %s: holds %d certificates, want 1", certPath, len(pair.Certificate))
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("load CA: %s: key type %T cannot sign", keyPath, pair.PrivateKey)
	}
	if err := checkCA(pair.Leaf, time.Now()); err != nil {
		return nil, fmt.Errorf("load CA: %s: %w; remove %s and %s to generate a new CA (clients must then trust the new certificate)",
			certPath, err, CertFile, KeyFile)
	}
	return newCA(pair.Leaf, key), nil
}

// LoadOrCreate loads the CA from dir as Load does or, if dir holds neither
// file, creates dir (0700) and a new CA in it: the key is written 0600 and
// the certificate 0644, each through a temporary file and a rename so a
// crash never leaves a partial file. One egressd process owns a state
// directory; two racing first starts would each write their own CA.
func LoadOrCreate(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	c, err := Load(dir)
	if !errors.Is(err, ErrNoCA) {
		return c, err
	}
	cert, key, err := generate(time.Now())
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	c = newCA(cert, key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeFiles(dir, keyPEM, c.certPEM); err != nil {
		return nil, err
	}
	return c, nil
}

// CertPEM returns the CA certificate, PEM-encoded: what clients install.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate returns the parsed CA certificate (for logging its subject
// and expiry). The caller must not modify it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Pool returns a new pool holding only the CA certificate.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// TLSCert returns the CA as a tls.Certificate (for goproxy.TLSConfigFromCA;
// ServerConfig is preferred, see Fetch).
func (c *CA) TLSCert() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key, Leaf: c.cert}
}

func newCA(cert *x509.Certificate, key crypto.Signer) *CA {
	return &CA{
		cert:     cert,
		key:      key,
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		now:      time.Now,
		entries:  make(map[string]*entry),
		capacity: DefaultCacheSize,
		inflight: make(map[string]*call),
	}
}

// generate makes a self-signed ECDSA P-256 CA. The random suffix in the
// name keeps two installations apart in a client's trust store.
func generate(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, nil, fmt.Errorf("generate CA name: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "egressd local CA " + hex.EncodeToString(suffix[:]),
			Organization: []string{"egressd"},
		},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true, // leaves only, no intermediates
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return cert, key, nil
}

// randomSerial returns a positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// checkCA refuses a certificate that cannot act as egressd's CA at now.
func checkCA(cert *x509.Certificate, now time.Time) error {
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return fmt.Errorf("certificate %q is not a CA (basicConstraints CA:FALSE or absent)", cert.Subject.CommonName)
	case cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Errorf("certificate %q may not sign certificates (keyUsage lacks certSign)", cert.Subject.CommonName)
	case now.Before(cert.NotBefore):
		return fmt.Errorf("certificate %q is not valid before %s", cert.Subject.CommonName, cert.NotBefore.UTC().Format(time.RFC3339))
	case now.After(cert.NotAfter):
		return fmt.Errorf("certificate %q expired on %s", cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkDir refuses a state directory that group or others may write: they
// could swap the key or the certificate.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("load CA: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("load CA: %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("load CA: %s has mode %04o, writable by group or others; run chmod 700 %s", dir, perm, dir)
	}
	return nil
}

// readKey reads the key file after checking, on the open descriptor, that
// it is a regular file that only its owner may access.
func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o, accessible by group or others; run chmod 600 %s", path, perm, path)
	}
	return readAll(f, path)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, path)
}

func readAll(f *os.File, path string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
	}
	return b, nil
}

// writeFiles writes both files to temporaries first and renames them into
// place only when both are on disk, key first.
func writeFiles(dir string, keyPEM, certPEM []byte) (err error) {
	keyTmp, err := writeTemp(dir, KeyFile, keyPEM, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(keyTmp)
		}
	}()
	certTmp, err := writeTemp(dir, CertFile, certPEM, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(certTmp)
		}
	}()
	if err := os.Rename(keyTmp, filepath.Join(dir, KeyFile)); err != nil {
		return fmt.Errorf("write CA key: %w", err)
	}
	if err := os.Rename(certTmp, filepath.Join(dir, CertFile)); err != nil {
		return fmt.Errorf("write CA certificate: %w", err)
	}
	return syncDir(dir)
}

// writeTemp writes data to a new file in dir and returns its path. The file
// is created 0600 (os.CreateTemp), so the key is never readable by others,
// even for a moment; perm is applied before any data is written.
func writeTemp(dir, name string, data []byte, perm fs.FileMode) (path string, err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write %s: %w", name, cerr)
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return f.Name(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
