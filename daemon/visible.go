package daemon

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Failures that do not close the door but must not go unnoticed: the
// self-test history that cannot be written, a CA that can no longer be
// read back. Each sets a metric, an error line when it starts, and a note
// in /readyz ("degraded: …") while it lasts; the policy keeps serving.

// visible holds the notes /readyz shows and the metrics they move.
type visible struct {
	historyErrs prometheus.Counter
	caOK        prometheus.Gauge
}

func (d *Daemon) registerVisible() {
	d.vis.historyErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_history_write_errors_total",
		Help: "Self-test and in-sandbox probe runs that could not be written to the history in the state directory (evidence lost)."})
	d.vis.caOK = prometheus.NewGauge(prometheus.GaugeOpts{Name: "egressd_ca_ok",
		Help: "1 while egressd's CA reads back from the state directory as the one it serves with; 0 when its key or certificate is gone or changed (the next start would fail or use another CA)."})
	d.reg.MustRegister(d.vis.historyErrs, d.vis.caOK)
}

// setNote records (why != "") or clears a degradation of kind for
// /readyz; it reports whether the kind was already noted.
func (d *Daemon) setNote(kind, why string) (was bool) {
	d.notesMu.Lock()
	defer d.notesMu.Unlock()
	_, was = d.notes[kind]
	if why == "" {
		delete(d.notes, kind)
	} else {
		d.notes[kind] = why
	}
	return was
}

// degradedNote is what /readyz says of the noted degradations ("" none).
func (d *Daemon) degradedNote() string {
	d.notesMu.Lock()
	defer d.notesMu.Unlock()
	if len(d.notes) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d.notes)) {
		parts = append(parts, d.notes[k])
	}
	return "degraded: " + strings.Join(parts, "; ")
}

// historyResult records whether a run reached the history.
func (d *Daemon) historyResult(err error) {
	if err == nil {
		if d.setNote("history", "") {
			d.log.Warn("self-test history written again")
		}
		return
	}
	d.vis.historyErrs.Inc()
	if !d.setNote("history", "self-test history cannot be written ("+err.Error()+"): runs are not recorded") {
		d.log.Error("self-test history cannot be written: runs are not recorded until it can (egressd_history_write_errors_total)", "err", err)
	}
}

// checkCA reads the CA back; a failure is an error line and a webhook
// report when it starts, egressd_ca_ok 0 and a /readyz note while it lasts.
func (d *Daemon) checkCA() {
	err := d.opt.CACheck()
	if err == nil {
		d.vis.caOK.Set(1)
		if d.setNote("ca", "") {
			d.log.Warn("egressd's CA reads back again")
		}
		return
	}
	d.vis.caOK.Set(0)
	if d.setNote("ca", "egressd's CA cannot be read back ("+err.Error()+"): the next start would fail, or make a CA the sandboxes do not trust") {
		return
	}
	d.log.Error("egressd's CA cannot be read back from the state directory: the next start would fail, or make a CA the sandboxes do not trust; restore it from a backup", "err", err)
	d.report("egressd.ca.unusable", map[string]any{"error": err.Error()})
}

// caTicker is the schedule of checkCA (nil channel: no check).
func (d *Daemon) caTicker() (<-chan time.Time, func()) {
	if d.opt.CACheck == nil {
		return nil, func() {}
	}
	d.checkCA()
	t := time.NewTicker(cmp.Or(d.opt.CAInterval, time.Minute))
	return t.C, t.Stop
}

// report posts an operational event to the webhook (Options.Webhook, else
// selftest.webhook), if any.
func (d *Daemon) report(event string, fields map[string]any) {
	if d.opt.notifyHook != nil {
		d.opt.notifyHook(event)
		return
	}
	url := d.webhook()
	if url == "" {
		return
	}
	body := map[string]any{"event": event, "time": time.Now().UTC()}
	maps.Copy(body, fields)
	go postReport(d.log, url, body)
}
