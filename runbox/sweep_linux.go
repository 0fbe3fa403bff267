package runbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/sandbox"
)

// record is what a run leaves in RunDir while it lives: everything a later
// sweep needs to remove after a crash (kill -9 runs no cleanup).
type record struct {
	PID    int    `json:"pid"`
	Cookie uint64 `json:"netns_cookie"` // the gateway namespace the run's table and link are in
	NS     string `json:"netns"`
	Table  string `json:"table"`
	Link   string `json:"link"`
	Tmp    string `json:"tmp"`
	Cgroup string `json:"cgroup,omitempty"` // the run's cgroup v2 child, if it had one
}

func (r record) path(dir string) string {
	return filepath.Join(dir, fmt.Sprintf("%x-%s.json", r.Cookie, r.Table))
}

func writeRecord(dir string, r record) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("run record: %w", err)
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(r.path(dir), b, 0o600); err != nil {
		return fmt.Errorf("run record: %w", err)
	}
	return nil
}

// Swept is what a sweep found.
type Swept struct {
	Removed []string // what it removed: tables, links, namespaces, temp dirs
	Live    []string // run tables of runs still alive, left in place
}

// Sweep removes, in the current namespace (gw), the leftovers of runs
// whose egressd died: their link, namespace, table, temp dir and record,
// in that order, so no link is ever left without its wall. A run table
// without a record is removed when its link is gone, or always with all
// (`egressd nft down --all`). Tables of live runs are listed, not touched.
func Sweep(gw *sandbox.NS, runDir, ifPrefix string, all bool) (Swept, error) {
	var out Swept
	var errs []error
	handled := map[string]bool{}
	ents, err := os.ReadDir(runDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return out, fmt.Errorf("sweep %s: %w", runDir, err)
	}
	for _, e := range ents {
		path := filepath.Join(runDir, e.Name())
		b, err := os.ReadFile(path)
		var r record
		if err != nil || json.Unmarshal(b, &r) != nil || r.PID <= 0 {
			continue
		}
		if r.Cookie != gw.Cookie() {
			continue // another namespace's run: its own sweeps handle it
		}
		handled[r.Table] = true
		if !errors.Is(unix.Kill(r.PID, 0), unix.ESRCH) {
			out.Live = append(out.Live, fmt.Sprintf("%s (egressd run pid %d)", r.Table, r.PID))
			continue
		}
		removed, err := sweepDead(gw, r)
		out.Removed = append(out.Removed, removed...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(path)
	}
	if names, err := sandbox.CleanupStale(NSPrefix); err != nil {
		errs = append(errs, err)
	} else {
		for _, n := range names {
			out.Removed = append(out.Removed, "netns "+n)
		}
	}
	tables, err := nft.Tables(nft.CurrentNamespace, TablePrefix)
	if err != nil {
		return out, errors.Join(append(errs, err)...)
	}
	for _, t := range tables {
		if handled[t] {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimPrefix(t, TablePrefix))
		if err != nil {
			continue
		}
		link := ifPrefix + strconv.Itoa(idx)
		if !all {
			// No record: a run of an older egressd (a live run writes its
			// record before its table). Only a table whose link is gone is
			// surely dead.
			if ok, err := sandbox.LinkExists(gw, link); err != nil || ok {
				continue
			}
		} else if err := sandbox.DeleteLink(gw, link); err != nil {
			errs = append(errs, err)
			continue // never a link without its wall
		}
		if err := nft.Down(nft.CurrentNamespace, t); err != nil && !errors.Is(err, nft.ErrNoTable) {
			errs = append(errs, err)
			continue
		}
		out.Removed = append(out.Removed, "table inet "+t)
	}
	return out, errors.Join(errs...)
}

// sweepDead removes what the dead run r left: its cgroup, link,
// namespace, table and temp dir, in that order. It stops at the first
// failure that could leave a link without its wall (or live processes),
// so the rest stays for a later sweep.
func sweepDead(gw *sandbox.NS, r record) (removed []string, err error) {
	if r.Cgroup != "" {
		// Its processes died with its init (PR_SET_PDEATHSIG); kill what
		// is left in the cgroup the dead run made, then remove it.
		if _, err := os.Stat(r.Cgroup); err == nil {
			if err := killCgroup(r.Cgroup); err != nil {
				return removed, err // processes may live: the wall stays
			}
			removed = append(removed, "cgroup "+r.Cgroup)
		}
	}
	if err := sandbox.DeleteLink(gw, r.Link); err != nil {
		return removed, err // the table stays: never a link without its wall
	}
	removed = append(removed, "link "+r.Link)
	if err := sandbox.Delete(r.NS); err == nil {
		removed = append(removed, "netns "+r.NS)
	}
	if err := nft.Down(nft.CurrentNamespace, r.Table); err == nil {
		removed = append(removed, "table inet "+r.Table)
	} else if !errors.Is(err, nft.ErrNoTable) {
		return removed, err
	}
	if r.Tmp != "" && strings.Contains(filepath.Base(r.Tmp), "egressd-run-") {
		if os.RemoveAll(r.Tmp) == nil {
			removed = append(removed, "dir "+r.Tmp)
		}
	}
	return removed, nil
}
