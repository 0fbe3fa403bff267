// Package inject holds the credentials egressd adds to requests under
// rules with an inject block, so that a sandbox can use a private registry
// or an API without ever holding the token. Secrets are read from files
// (Kubernetes Secrets, systemd credentials), re-read when the file
// changes, and never appear in an error message: errors name the file,
// never its content.
package inject

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/policy"
)

// maxSecretBytes bounds a secret file: a header value, not a document.
const maxSecretBytes = 16 << 10

// ErrSecret is wrapped by every error about a secret file.
var ErrSecret = errors.New("inject: secret unavailable")

// Store reads secret files and caches each until the file changes (another
// inode, size or modification time: a rewrite, or the symlink swap by
// which Kubernetes updates a mounted Secret). It is safe for concurrent
// use; the zero value is ready.
type Store struct {
	mu sync.Mutex
	m  map[string]*secret
}

type secret struct {
	fi    os.FileInfo
	value string
}

// read returns the secret in file, trimmed of surrounding white space.
func (s *Store) read(file string) (string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSecret, err)
	}
	s.mu.Lock()
	c := s.m[file]
	s.mu.Unlock()
	if c != nil && os.SameFile(c.fi, fi) && c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) && !recent(fi) {
		return c.value, nil
	}
	v, err := readSecret(file)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*secret{}
	}
	s.m[file] = &secret{fi: fi, value: v}
	s.mu.Unlock()
	return v, nil
}

// recent reports a modification within the file system's timestamp
// granularity: a second write in the same tick would leave size and time
// alike, so such a file is read again rather than trusted from the cache.
func recent(fi os.FileInfo) bool { return time.Since(fi.ModTime()) < 2*time.Second }

func readSecret(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSecret, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: read %s: %w", ErrSecret, file, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("%w: %s is larger than %d bytes", ErrSecret, file, maxSecretBytes)
	}
	v := strings.TrimSpace(string(b))
	switch {
	case v == "":
		return "", fmt.Errorf("%w: %s is empty", ErrSecret, file)
	case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
		// a line break would let the file add headers of its own
		return "", fmt.Errorf("%w: %s holds a line break or control character", ErrSecret, file)
	}
	return v, nil
}

// Secret is the current content of file, trimmed (for secrets that are not
// a rule's header, such as the parent proxy's credentials).
func (s *Store) Secret(file string) (string, error) { return s.read(file) }

// Value is the header value in for the current content of its file.
func (s *Store) Value(in *policy.Inject) (string, error) {
	v, err := s.read(in.File)
	if err != nil {
		return "", err
	}
	if in.BasicUser != "" {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(in.BasicUser+":"+v)), nil
	}
	return in.Prefix + v, nil
}

// Apply removes every client value of the headers that inject rules set
// for this host (strip) and, when in is not nil, sets in's header to the
// credential. On error h is stripped but carries no credential.
func (s *Store) Apply(h http.Header, strip []string, in *policy.Inject) error {
	for _, name := range strip {
		h.Del(name)
	}
	if in == nil {
		return nil
	}
	h.Del(in.Header)
	v, err := s.Value(in)
	if err != nil {
		return err
	}
	h.Set(in.Header, v)
	return nil
}
