package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
// ConfigMap updates replace files by rename). It returns when ctx ends.
func (d *Daemon) WatchReload(ctx context.Context, path string) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	var werrs <-chan error
	if path != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("watch config: %w", err)
		}
		defer w.Close()
		if err := w.Add(filepath.Dir(path)); err != nil {
			return fmt.Errorf("watch config dir: %w", err)
		}
		events, werrs = w.Events, w.Errors
	}
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

// notify posts a leak report to the webhook. A run whose only failures
// are positive controls is "egressd.selftest.control-failed": the network
// may merely be down, and that must not page anyone as a leak.
func notify(log *slog.Logger, url string, v Verdict) {
	event := "egressd.selftest.leak"
	if len(v.Leaks) == 0 && len(v.ControlsFailed) > 0 {
		event = "egressd.selftest.control-failed"
	}
	body, _ := json.Marshal(map[string]any{
		"event": event, "time": time.Now().UTC(), "leaks": v.Leaks, "controls_failed": v.ControlsFailed, "error": fmt.Sprint(v.Err),
	})
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		log.Error("webhook failed", "url", url, "err", err)
		return
	}
	resp.Body.Close()
}
