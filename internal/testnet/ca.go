package testnet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// OriginNames are the DNS names in the TLS origin's certificate.
var OriginNames = []string{"allowed.test", "other.test", "origin.test", "*.test"}

// CA is the test certificate authority of one Topo. Its key never leaves
// the process.
type CA struct {
	// Cert is the CA certificate; CertPEM is the same, PEM-encoded (what an
	// upstream_ca file holds); Pool holds just Cert.
	Cert    *x509.Certificate
	CertPEM []byte
	Pool    *x509.CertPool

	serverConfig *tls.Config
}

// newCA makes an ECDSA P-256 CA and a leaf certificate for OriginNames and
// the origin addresses, valid for a day around now.
func newCA() (*CA, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "egressd testnet CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate origin key: %w", err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: OriginNames[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     OriginNames,
		IPAddresses:  []net.IP{OriginAddr4.AsSlice(), OriginAddr6.AsSlice()},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create origin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &CA{
		Cert:    caCert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Pool:    pool,
		serverConfig: &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}},
			MinVersion:   tls.VersionTLS12,
		},
	}, nil
}
