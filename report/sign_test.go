package report

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestSignAndVerifyPack(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	pack := []byte("# egressd evidence pack\n")
	s := &Seal{Generated: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Config: "egressd.yaml", PolicySHA256: SHA256Hex([]byte("version: 1\n")), WallsSHA256: SHA256Hex(nil)}
	if err := SignPack(pack, s, key); err != nil {
		t.Fatal(err)
	}
	sig, _ := json.Marshal(s)
	if _, err := VerifyPack(pack, sig, pub); err != nil {
		t.Fatal(err)
	}
	edited := *s
	edited.Config = "other.yaml"
	editedSig, _ := json.Marshal(&edited)
	for name, tc := range map[string]struct {
		pack, sig []byte
		pub       ed25519.PublicKey
	}{
		"pack":      {[]byte("# egressd evidence pack!\n"), sig, pub},
		"seal":      {pack, editedSig, pub},
		"other key": {pack, sig, otherPub},
	} {
		if _, err := VerifyPack(tc.pack, tc.sig, tc.pub); !errors.Is(err, ErrPackTampered) {
			t.Errorf("%s: %v, want ErrPackTampered", name, err)
		}
	}
	if _, err := VerifyPack(pack, []byte(`{"version":1,"extra":1}`), pub); err == nil || errors.Is(err, ErrPackTampered) {
		t.Errorf("unknown field: %v, want a malformed-file error", err)
	}
}

func FuzzVerifyPack(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	s := &Seal{Config: "c"}
	SignPack([]byte("p"), s, key)
	sig, _ := json.Marshal(s)
	f.Add([]byte("p"), sig)
	f.Add([]byte(""), []byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, pack, sig []byte) {
		if _, err := VerifyPack(pack, sig, pub); err == nil && string(pack) != "p" {
			t.Fatalf("a pack the key never signed verified: %q %q", pack, sig)
		}
	})
}
