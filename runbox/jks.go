package runbox

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf16"
)

// TrustStorePassword is the password of the run's Java trust store. It
// guards nothing (the store holds only public certificates); Java needs
// one to check the store's integrity digest.
const TrustStorePassword = "changeit"

// jksTrustStore encodes the certificates of a PEM bundle as a Java
// KeyStore (JKS, version 2) of trusted-certificate entries, which every
// Java since 1.2 reads with -Djavax.net.ssl.trustStoreType=JKS. Layout:
// magic 0xFEEDFEED, version 2, entry count, then per entry tag 2 (trusted
// certificate), alias, creation time (ms), "X.509", DER length and DER;
// last a SHA-1 digest of the password as UTF-16BE, "Mighty Aphrodite" and
// everything before it. Blocks that are not parseable certificates are
// left out (one bad entry would make Java refuse the whole store).
func jksTrustStore(bundle []byte, password string, created time.Time) ([]byte, error) {
	var ders [][]byte
	for rest := bundle; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
			ders = append(ders, blk.Bytes)
		}
	}
	if len(ders) == 0 {
		return nil, errors.New("java trust store: no certificate in the bundle")
	}
	var b bytes.Buffer
	u32 := func(v uint32) { binary.Write(&b, binary.BigEndian, v) }
	utf := func(s string) { // ASCII only here: modified UTF-8 is plain bytes
		binary.Write(&b, binary.BigEndian, uint16(len(s)))
		b.WriteString(s)
	}
	u32(0xFEEDFEED)
	u32(2)
	u32(uint32(len(ders)))
	for i, der := range ders {
		u32(2)
		utf("cert-" + strconv.Itoa(i))
		binary.Write(&b, binary.BigEndian, uint64(created.UnixMilli()))
		utf("X.509")
		u32(uint32(len(der)))
		b.Write(der)
	}
	h := sha1.New()
	for _, c := range utf16.Encode([]rune(password)) {
		h.Write([]byte{byte(c >> 8), byte(c)})
	}
	h.Write([]byte("Mighty Aphrodite"))
	h.Write(b.Bytes())
	return h.Sum(b.Bytes()), nil
}

// writeJavaTrustStore writes the certificates of the PEM bundle at
// bundle (what SSL_CERT_FILE names) as a JKS trust store at path.
func writeJavaTrustStore(path, bundle string) (string, error) {
	pemData, err := os.ReadFile(bundle)
	if err != nil {
		return "", fmt.Errorf("java trust store: %w", err)
	}
	data, err := jksTrustStore(pemData, TrustStorePassword, time.Now())
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("java trust store: %w", err)
	}
	return path, nil
}
