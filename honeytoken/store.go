package honeytoken

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// StoreFile, in egressd's state directory, holds the honeytokens issued
// for containers and pods (`egressd honeytokens issue`), one JSON line
// each; the daemon watches it.
const StoreFile = "honeytokens.jsonl"

// maxStoreLine bounds one line of the store.
const maxStoreLine = 64 << 10

// Append adds tokens to the store in dir (file mode 0600: the values are
// canaries, but a copy outside the sandbox lets anyone plant them).
func Append(dir string, ts []Token) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("honeytoken store: %w", err)
	}
	path := filepath.Join(dir, StoreFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("honeytoken store: %w", err)
	}
	var buf []byte
	for _, t := range ts {
		b, err := json.Marshal(t)
		if err != nil {
			f.Close()
			return fmt.Errorf("honeytoken store: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	_, err = f.Write(buf) // one write: a reader never sees half a set
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("honeytoken store %s: %w", path, err)
	}
	return nil
}

// Load reads the store in dir; none is an empty list.
func Load(dir string) ([]Token, error) {
	path := filepath.Join(dir, StoreFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("honeytoken store: %w", err)
	}
	defer f.Close()
	var out []Token
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxStoreLine)
	for n := 1; sc.Scan(); n++ {
		var t Token
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil || t.Value == "" || t.Identity == "" {
			return nil, fmt.Errorf("honeytoken store %s:%d: not a honeytoken line", path, n)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("honeytoken store %s: %w", path, err)
	}
	return out, nil
}

// Watch keeps a registry's "state" source in step with the store in a
// directory: Refresh reloads it when the file changed.
type Watch struct {
	Dir  string
	Reg  *Registry
	mod  time.Time
	size int64
}

// SourceState names the store's tokens in a Registry.
const SourceState = "state"

// Refresh reloads the store if its size or modification time changed.
func (w *Watch) Refresh() error {
	st, err := os.Stat(filepath.Join(w.Dir, StoreFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if w.size != 0 || !w.mod.IsZero() {
			w.Reg.Set(SourceState, nil)
			w.mod, w.size = time.Time{}, 0
		}
		return nil
	case err != nil:
		return fmt.Errorf("honeytoken store: %w", err)
	case st.ModTime().Equal(w.mod) && st.Size() == w.size:
		return nil
	}
	ts, err := Load(w.Dir)
	if err != nil {
		return err // the tokens loaded before stay watched
	}
	w.Reg.Set(SourceState, ts)
	w.mod, w.size = st.ModTime(), st.Size()
	return nil
}
