package honeytoken

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/big"
	"strings"
	"time"
)

// Kind is what a honeytoken pretends to be.
type Kind string

// The kinds Issue makes.
const (
	AWSAccessKeyID     Kind = "aws-access-key-id"
	AWSSecretAccessKey Kind = "aws-secret-access-key"
	GitHubToken        Kind = "github-token"
	APIKey             Kind = "api-key"
)

// Token is one canary credential: whose it is, what it looks like, the
// environment variable it is placed in, and its value.
type Token struct {
	Identity string    `json:"identity"`
	Kind     Kind      `json:"kind"`
	Name     string    `json:"name"` // the environment variable
	Value    string    `json:"value"`
	Issued   time.Time `json:"issued"`
}

const (
	base62     = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base62Alt  = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	minAccount = 1_000_000_000_000 // AWS account ids have 12 digits: this one has 13
)

// Issue makes a fresh set of canary credentials for identity, from
// crypto/rand: unique per call, so per identity and run.
//
// How each is chosen so that it can never be valid:
//
//   - AWS access key id: "AKIA" and 16 base32 characters, AWS's own format
//     for a long-term key. In the current key generation the first 48 bits
//     after the prefix hold a generation bit (set) and the 40-bit account
//     number the key belongs to; AWS account numbers have 12 digits, and
//     the number encoded here has 13 (≥ 10^12): no such account exists. The
//     rest is random.
//   - AWS secret access key: 40 random characters, paired with that id.
//   - GitHub token: "ghp_", 30 random base62 characters and a 6-character
//     checksum that is deliberately wrong: it differs from the CRC32
//     checksum of GitHub's token format under every reading of it (over
//     the random part or the whole token, either base62 alphabet), so
//     GitHub rejects it before any lookup.
//   - API key: 40 random base62 characters, registered with no service.
//
// Values use letters and digits only, so URL and form encoding leave them
// as they are.
func Issue(identity string) ([]Token, error) {
	return issue(rand.Reader, identity, time.Now().UTC())
}

func issue(r io.Reader, identity string, now time.Time) ([]Token, error) {
	id, err := awsKeyID(r)
	if err != nil {
		return nil, err
	}
	secret, err := randBase62(r, 40)
	if err != nil {
		return nil, err
	}
	gh, err := githubToken(r)
	if err != nil {
		return nil, err
	}
	api, err := randBase62(r, 40)
	if err != nil {
		return nil, err
	}
	mk := func(k Kind, name, v string) Token {
		return Token{Identity: identity, Kind: k, Name: name, Value: v, Issued: now}
	}
	return []Token{
		mk(AWSAccessKeyID, "AWS_ACCESS_KEY_ID", id),
		mk(AWSSecretAccessKey, "AWS_SECRET_ACCESS_KEY", secret),
		mk(GitHubToken, "GITHUB_TOKEN", gh),
		mk(APIKey, "API_KEY", api),
	}, nil
}

// awsKeyID is "AKIA" and 16 base32 characters encoding a generation bit, a
// 13-digit (impossible) account number and random bits.
func awsKeyID(r io.Reader) (string, error) {
	var b [10]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("honeytoken: random: %w", err)
	}
	acct := new(big.Int).SetUint64(1<<40 - minAccount)
	n, err := rand.Int(r, acct)
	if err != nil {
		return "", fmt.Errorf("honeytoken: random: %w", err)
	}
	account := minAccount + n.Uint64()
	head := binary.BigEndian.Uint64(append([]byte{0, 0}, b[:6]...))
	head = 1<<47 | account<<7 | head&0x7f
	var hb [8]byte
	binary.BigEndian.PutUint64(hb[:], head)
	copy(b[:6], hb[2:])
	return "AKIA" + base32.StdEncoding.EncodeToString(b[:]), nil
}

// AWSAccount decodes the account number an access key id of the current
// generation encodes (0, false for another shape).
func AWSAccount(id string) (uint64, bool) {
	if len(id) != 20 {
		return 0, false
	}
	b, err := base32.StdEncoding.DecodeString(id[4:])
	if err != nil || len(b) != 10 {
		return 0, false
	}
	z := binary.BigEndian.Uint64(append([]byte{0, 0}, b[:6]...))
	return (z & 0x7fffffffff80) >> 7, z&(1<<47) != 0
}

// githubToken is "ghp_", 30 random base62 characters and a checksum that
// matches no reading of GitHub's.
func githubToken(r io.Reader) (string, error) {
	body, err := randBase62(r, 30)
	if err != nil {
		return "", err
	}
	bad := map[string]bool{}
	for _, data := range []string{body, "ghp_" + body} {
		sum := crc32.ChecksumIEEE([]byte(data))
		bad[encode62(sum, base62)], bad[encode62(sum, base62Alt)] = true, true
	}
	sum, err := randBase62(r, 6)
	if err != nil {
		return "", err
	}
	for i := 0; bad[sum] && i < len(base62); i++ { // at most 5 tries: 4 strings are bad
		sum = sum[:5] + string(base62[i])
	}
	return "ghp_" + body + sum, nil
}

// GitHubChecksums returns the checksums GitHub's token format could
// expect for a "ghp_" token (tests and docs: a honeytoken's is none).
func GitHubChecksums(token string) []string {
	body := strings.TrimPrefix(token, "ghp_")
	if len(body) != 36 {
		return nil
	}
	var out []string
	for _, data := range []string{body[:30], "ghp_" + body[:30]} {
		sum := crc32.ChecksumIEEE([]byte(data))
		out = append(out, encode62(sum, base62), encode62(sum, base62Alt))
	}
	return out
}

// encode62 is v in base62, left-padded with zeros to 6 characters.
func encode62(v uint32, alphabet string) string {
	var b [6]byte
	for i := 5; i >= 0; i-- {
		b[i] = alphabet[v%62]
		v /= 62
	}
	return string(b[:])
}

func randBase62(r io.Reader, n int) (string, error) {
	out := make([]byte, 0, n)
	var buf [64]byte
	for len(out) < n {
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			return "", fmt.Errorf("honeytoken: random: %w", err)
		}
		for _, c := range buf {
			if c < 248 && len(out) < n { // 248 = 4*62: no modulo bias
				out = append(out, base62[c%62])
			}
		}
	}
	return string(out), nil
}

// EnvLines renders tokens as KEY=VALUE environment entries.
func EnvLines(ts []Token) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name + "=" + t.Value
	}
	return out
}

// Files renders the well-known credential files the tokens fill, by path
// relative to a home directory: the AWS shared credentials file and git's
// credential store.
func Files(ts []Token) map[string]string {
	by := map[Kind]string{}
	for _, t := range ts {
		by[t.Kind] = t.Value
	}
	out := map[string]string{}
	if by[AWSAccessKeyID] != "" && by[AWSSecretAccessKey] != "" {
		out[".aws/credentials"] = fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", by[AWSAccessKeyID], by[AWSSecretAccessKey])
	}
	if by[GitHubToken] != "" {
		out[".git-credentials"] = fmt.Sprintf("https://x-access-token:%s@github.com\n", by[GitHubToken])
	}
	return out
}
