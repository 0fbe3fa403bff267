package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchReload reloads on SIGHUP and, when path is not empty, whenever the
// config file changes (its directory is watched, since editors and
// ConfigMap updates replace files by rename). It returns when ctx ends. A
// file watch that cannot be set up is logged and leaves SIGHUP working:
// returning would unregister SIGHUP, whose default action ends the process
// at the next `systemctl reload`.
func (d *Daemon) WatchReload(ctx context.Context, path string) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	var werrs <-chan error
	if path != "" {
		w, err := watchDir(path)
		if err != nil {
			d.log.Error("config file changes will not be seen: reload with SIGHUP", "err", err)
		} else {
			defer w.Close()
			events, werrs = w.Events, w.Errors
		}
	}
	d.watchUp.Do(func() { close(d.watching) })
	base := filepath.Base(path)
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			d.Reload(ctx, "SIGHUP")
		case ev := <-events:
			// "..data" is how a Kubernetes ConfigMap volume swaps files
			if filepath.Base(ev.Name) == base || filepath.Base(ev.Name) == "..data" {
				debounce = time.After(200 * time.Millisecond)
			}
		case err := <-werrs:
			d.log.Warn("config watch error", "err", err)
		case <-debounce:
			d.Reload(ctx, "file change")
		}
	}
}

func watchDir(path string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch config: %w", err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch config dir %s: %w", filepath.Dir(path), err)
	}
	return w, nil
}

// notify posts a leak report to the webhook; "error" is present only when
// the run could not complete. A run whose only failures are positive
// controls is "egressd.selftest.control-failed": the network may merely be
// down, and that must not page anyone as a leak. A transport failure or an
// answer other than 2xx is logged as a failed report.
func notify(log *slog.Logger, url string, v Verdict) {
	event := "egressd.selftest.leak"
	if len(v.Leaks) == 0 && len(v.ControlsFailed) > 0 {
		event = "egressd.selftest.control-failed"
	}
	report := map[string]any{"event": event, "time": time.Now().UTC(), "leaks": v.Leaks, "controls_failed": v.ControlsFailed}
	if v.Err != nil {
		report["error"] = v.Err.Error()
	}
	postReport(log, url, report)
}

// postReport sends one report to the webhook; a transport failure or an answer
// other than 2xx is logged as a failed report.
func postReport(log *slog.Logger, url string, report map[string]any) {
	body, _ := json.Marshal(report)
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		log.Error("webhook failed: the report was not delivered", "event", report["event"], "url", url, "err", err)
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Error("webhook failed: the report was refused", "event", report["event"], "url", url, "status", resp.StatusCode)
	}
}
