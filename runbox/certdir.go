package runbox

import (
	"bytes"
	"crypto/sha1" // OpenSSL's subject hash is SHA-1 by definition, not for security
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// The run's hashed certificate directory: SSL_CERT_DIR names a directory,
// not a file. Go and rustls read every file in it; OpenSSL looks a CA up
// by <subject hash>.<n>, the names c_rehash gives. So the directory holds
// one PEM file per certificate of the bundle, named that way, and serves
// both.

// CertDirFor is the hashed directory that goes with the bundle at path.
func CertDirFor(bundle string) string { return bundle + ".d" }

// writeCertDir writes CertDirFor(bundle): every certificate of the bundle
// under its OpenSSL subject-hash name. A certificate whose subject cannot
// be hashed (a name OpenSSL itself would reject) is written under a name
// OpenSSL's lookup never tries; Go still reads it.
func writeCertDir(bundle string) (string, error) {
	data, err := os.ReadFile(bundle)
	if err != nil {
		return "", fmt.Errorf("cert dir: %w", err)
	}
	dir := CertDirFor(bundle)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cert dir: %w", err)
	}
	used := map[string]int{}
	n := 0
	for rest := data; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if blk.Type != "CERTIFICATE" || err != nil {
			continue
		}
		h, err := subjectHash(c.RawSubject)
		if err != nil {
			h = "unhashed"
		}
		name := fmt.Sprintf("%s.%d", h, used[h])
		used[h]++
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o644); err != nil {
			return "", fmt.Errorf("cert dir: %w", err)
		}
		n++
	}
	if n == 0 {
		return "", errors.New("cert dir: no certificate in the bundle")
	}
	return dir, nil
}

// subjectHash is OpenSSL's X509_NAME_hash (OpenSSL 1.0 and later): SHA-1
// of the name's canonical encoding, the first four bytes read little-endian.
// The canonical encoding is the DER of each RDN set, without the outer
// SEQUENCE, with every string value re-encoded as a UTF8String that is
// trimmed, has runs of whitespace collapsed to one space, and ASCII
// lower-cased (x509_name_canon and asn1_string_canon in crypto/x509/x_name.c).
func subjectHash(rawSubject []byte) (string, error) {
	var rdns []asn1.RawValue
	if rest, err := asn1.Unmarshal(rawSubject, &rdns); err != nil || len(rest) > 0 {
		return "", fmt.Errorf("subject hash: not a name: %v", err)
	}
	var canon []byte
	for _, set := range rdns {
		if set.Class != asn1.ClassUniversal || set.Tag != asn1.TagSet {
			return "", errors.New("subject hash: an RDN is not a SET")
		}
		var avas [][]byte
		for b := set.Bytes; len(b) > 0; {
			var ava struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			var err error
			if b, err = asn1.Unmarshal(b, &ava); err != nil {
				return "", fmt.Errorf("subject hash: %w", err)
			}
			if s, ok := canonString(ava.Value); ok {
				ava.Value = asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: s}
			}
			enc, err := asn1.Marshal(ava)
			if err != nil {
				return "", fmt.Errorf("subject hash: %w", err)
			}
			avas = append(avas, enc)
		}
		slices.SortFunc(avas, bytes.Compare) // DER orders a SET OF by encoding
		enc, err := asn1.Marshal(asn1.RawValue{Tag: asn1.TagSet, IsCompound: true, Bytes: bytes.Join(avas, nil)})
		if err != nil {
			return "", fmt.Errorf("subject hash: %w", err)
		}
		canon = append(canon, enc...)
	}
	sum := sha1.Sum(canon)
	return fmt.Sprintf("%08x", binary.LittleEndian.Uint32(sum[:4])), nil
}

// canonString converts the string types OpenSSL canonicalizes to their
// canonical UTF-8 form; ok is false for any other value (copied as is).
func canonString(v asn1.RawValue) ([]byte, bool) {
	if v.Class != asn1.ClassUniversal {
		return nil, false
	}
	var runes []rune
	switch v.Tag {
	case asn1.TagUTF8String:
		if !utf8.Valid(v.Bytes) {
			return nil, false
		}
		runes = []rune(string(v.Bytes))
	case asn1.TagPrintableString, asn1.TagT61String, asn1.TagIA5String, 26: // 26: VisibleString; T61 is read as Latin-1
		for _, c := range v.Bytes {
			runes = append(runes, rune(c))
		}
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return nil, false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		runes = utf16.Decode(u)
	case 28: // UniversalString: UCS-4
		if len(v.Bytes)%4 != 0 {
			return nil, false
		}
		for i := 0; i < len(v.Bytes); i += 4 {
			runes = append(runes, rune(binary.BigEndian.Uint32(v.Bytes[i:])))
		}
	default:
		return nil, false
	}
	b := []byte(string(runes))
	space := func(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
	for len(b) > 0 && space(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && space(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c >= 0x80:
			out = append(out, c)
		case space(c):
			out = append(out, ' ')
			for i+1 < len(b) && space(b[i+1]) {
				i++
			}
		case 'A' <= c && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, c)
		}
	}
	return out, true
}
