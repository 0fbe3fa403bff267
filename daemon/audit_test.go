package daemon

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/egressd/egressd/audit"
)

// diskWriter is an audit file on a disk that can fill up: while full,
// every write fails whole with ENOSPC.
type diskWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	full atomic.Bool
}

func (w *diskWriter) Write(p []byte) (int, error) {
	if w.full.Load() {
		return 0, syscall.ENOSPC
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// syncBuffer collects log output written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

func (f *fixture) get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := f.client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Egressd-Deny")
}

func readyz(t *testing.T, f *fixture) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + f.d.adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestAuditFailsClosed: while the audit log cannot be written, what the
// policy allows is refused with 503 audit-unavailable and denials stay
// 403; /readyz is 503; the metrics say so; one error line per change of
// state; a stop reports the seal it could not write. With
// audit.on_error: allow, traffic flows (loudly).
func TestAuditFailsClosed(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("on_error_allow=%v", allow), func(t *testing.T) {
			disk := &diskWriter{}
			sink, err := audit.NewSink(disk)
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			f := startWith(t, func(o *Options) {
				o.Logger = slog.New(sink.Handler(slog.NewTextHandler(&logs, nil)))
				o.Audit = sink
			})
			if allow {
				f.write(t, config("127.0.0.1:0", port(f.a))+"audit:\n  on_error: allow\n")
				if err := f.d.Reload(t.Context(), "test"); err != nil {
					t.Fatal(err)
				}
			}
			if code, _ := f.get(t, f.a); code != 200 {
				t.Fatalf("origin a with a working audit log: %d", code)
			}
			disk.full.Store(true)
			// a denial is logged before its 403 is sent: after it the
			// sink has seen the failure
			if code, _ := f.get(t, f.b); code != 403 {
				t.Fatalf("origin b (denied) on a full disk: %d, want 403", code)
			}
			for range 3 {
				code, reason := f.get(t, f.a)
				if allow && code != 200 {
					t.Fatalf("on_error allow: origin a on a full disk: %d %s, want 200", code, reason)
				}
				if !allow && (code != 503 || reason != "audit-unavailable") {
					t.Fatalf("origin a on a full disk: %d %q, want 503 audit-unavailable", code, reason)
				}
				if code, _ := f.get(t, f.b); code != 403 {
					t.Fatalf("origin b (denied) on a full disk: %d, want 403", code)
				}
			}
			code, why := readyz(t, f)
			if (!allow && code != 503) || (allow && code != 200) || !strings.Contains(why, "audit") {
				t.Errorf("/readyz on a full disk: %d %q", code, why)
			}
			if n := counter(t, f, "egressd_audit_ok"); n != 0 {
				t.Errorf("egressd_audit_ok on a full disk: %d", n)
			}
			if n := counter(t, f, "egressd_audit_write_errors_total"); n < 7 {
				t.Errorf("egressd_audit_write_errors_total: %d, want >= 7", n)
			}
			if n := logs.count(`msg="audit log cannot be written`); n != 1 {
				t.Errorf("%d error lines for one failure state, want 1:\n%s", n, logs.b.String())
			}

			disk.full.Store(false) // space again
			if err := sink.Retry(); err != nil {
				t.Fatal(err)
			}
			if code, _ := f.get(t, f.a); code != 200 {
				t.Fatalf("origin a after space returned: %d", code)
			}
			if code, _ := readyz(t, f); code != 200 {
				t.Errorf("/readyz after space returned: %d", code)
			}
			if n := counter(t, f, "egressd_audit_ok"); n != 1 {
				t.Errorf("egressd_audit_ok after space returned: %d", n)
			}
			if n := logs.count(`msg="audit log writable again`); n != 1 {
				t.Errorf("%d recovery lines, want 1", n)
			}
			disk.full.Store(true)
			if err := f.stop(); err == nil || !strings.Contains(err.Error(), "not sealed") {
				t.Errorf("stop with a full disk: %v, want the unwritten seal reported", err)
			}
		})
	}
}

// TestAuditFailingAtStart: egressd starts on a full disk (restart after a
// stop that could not seal): it runs, refuses what it would allow and says
// why, until the log can be written.
func TestAuditFailingAtStart(t *testing.T) {
	t.Parallel()
	disk := &diskWriter{}
	disk.full.Store(true)
	sink, err := audit.NewSink(disk)
	if err != nil {
		t.Fatalf("a sink on a full disk: %v", err)
	}
	var logs syncBuffer
	f := startWith(t, func(o *Options) {
		o.Logger = slog.New(sink.Handler(slog.NewTextHandler(&logs, nil)))
		o.Audit = sink
	})
	if code, reason := f.get(t, f.a); code != 503 || reason != "audit-unavailable" {
		t.Fatalf("origin a on a full disk at start: %d %q", code, reason)
	}
	if code, _ := readyz(t, f); code != 503 {
		t.Errorf("/readyz: %d", code)
	}
	if n := logs.count(`msg="audit log cannot be written`); n != 1 {
		t.Errorf("%d error lines at start, want 1", n)
	}
	disk.full.Store(false)
	if err := sink.Retry(); err != nil {
		t.Fatal(err)
	}
	if code, _ := f.get(t, f.a); code != 200 {
		t.Fatalf("origin a after space returned: %d", code)
	}
	if !bytes.HasPrefix(disk.buf.Bytes(), []byte(`{"seq":1,`)) || !bytes.Contains(disk.buf.Bytes(), []byte(`"audit":"open"`)) {
		t.Errorf("the log does not start with its open record: %.80s", disk.buf.Bytes())
	}
}
