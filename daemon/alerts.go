package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/proxy"
)

// Alerts: "any high-risk host hit is worth a same-day look, even when it
// was denied", and "any outbound attempt from an evaluation sandbox is an
// alert". Each such attempt gets an error-level log line and a count per
// identity at once; the webhook gets them in batches (one POST per
// alerts.batch window at most, maxAlertBatch attempts in it, the rest
// counted). The request path only does a non-blocking send: a slow or
// dead webhook never holds a request, it drops alerts (counted).

const (
	alertQueue    = 1024
	maxAlertBatch = 100
	// maxAlertIdentities caps the identities with a series of their own
	// in egressd_alerts_total; alertSeriesTTL drops the series of an
	// identity quiet that long.
	maxAlertIdentities = 1000
	alertSeriesTTL     = time.Hour
)

type alerter struct {
	log     *slog.Logger
	ch      chan proxy.Attempt
	hook    func() (url string, batch time.Duration)
	total   *prometheus.CounterVec
	dropped prometheus.Counter
	posts   *prometheus.CounterVec
	client  *http.Client
	now     func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // identities with a series, last alert
}

// otherIdentity is the series of identities beyond maxAlertIdentities.
const otherIdentity = "_other"

// seriesIdentity is the identity label an alert of id counts under: its
// own while fewer than maxAlertIdentities have one, else otherIdentity.
func (a *alerter) seriesIdentity(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.seen[id]; !ok && len(a.seen) >= maxAlertIdentities {
		id = otherIdentity
	}
	a.seen[id] = a.now()
	return id
}

// expire drops the series of identities quiet for alertSeriesTTL (a
// sandbox that is gone), so the series do not grow with every sandbox
// ever seen.
func (a *alerter) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, last := range a.seen {
		if a.now().Sub(last) > alertSeriesTTL {
			delete(a.seen, id)
			a.total.DeletePartialMatch(prometheus.Labels{"identity": id})
		}
	}
}

func newAlerter(log *slog.Logger, hook func() (string, time.Duration)) *alerter {
	return &alerter{
		log: log, ch: make(chan proxy.Attempt, alertQueue), hook: hook,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_alerts_total",
			Help: "Attempts that raised an alert, by identity and kind (high-risk, evaluation, probe-label, probe-leak); at most 1000 identities have a series (the rest count as _other), and an identity's series goes after an hour without alerts."}, []string{"identity", "kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_alerts_dropped_total",
			Help: "Alerts not sent to the webhook: the queue was full or the batch over its cap (each is still logged and counted)."}),
		posts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egressd_alert_webhook_posts_total",
			Help: "Alert webhook POSTs by result (ok, error)."}, []string{"result"}),
		client: &http.Client{Timeout: 10 * time.Second},
		now:    time.Now,
		seen:   map[string]time.Time{},
	}
}

// attempt is proxy.Config.Alert: log, count, queue; never blocks.
func (a *alerter) attempt(at proxy.Attempt) {
	kind := "high-risk"
	switch {
	case at.Honeytoken != "":
		kind = "honeytoken"
	case at.Kind != "":
		kind = at.Kind
	case !at.HighRisk:
		kind = "evaluation"
	}
	a.total.WithLabelValues(a.seriesIdentity(at.Identity), kind).Inc()
	a.log.Error("alert: "+kind+" attempt", "identity", at.Identity, "method", at.Method, "host", at.Host, "port", at.Port,
		"decision", at.Decision, "reason", at.Reason, "high_risk", at.HighRisk, "evaluation", at.Evaluation,
		"honeytoken", at.Honeytoken, "honeytoken_of", at.HoneytokenOf, "where", at.Where)
	select {
	case a.ch <- at:
	default:
		a.dropped.Inc()
	}
}

// run batches queued attempts and posts them until ctx ends.
func (a *alerter) run(ctx context.Context) {
	sweep := time.NewTicker(alertSeriesTTL / 6)
	defer sweep.Stop()
	for {
		var first proxy.Attempt
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			a.expire()
			continue
		case first = <-a.ch:
		}
		url, window := a.hook()
		batch := []proxy.Attempt{first}
		over := 0
		timer := time.NewTimer(window)
	collect:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case at := <-a.ch:
				if len(batch) < maxAlertBatch {
					batch = append(batch, at)
				} else {
					over++
				}
			case <-timer.C:
				break collect
			}
		}
		if over > 0 {
			a.dropped.Add(float64(over))
		}
		if url == "" {
			continue
		}
		if err := a.post(ctx, url, batch, over); err != nil {
			a.posts.WithLabelValues("error").Inc()
			a.log.Error("alert webhook failed", "url", url, "attempts", len(batch), "err", err)
		} else {
			a.posts.WithLabelValues("ok").Inc()
		}
	}
}

func (a *alerter) post(ctx context.Context, url string, batch []proxy.Attempt, over int) error {
	body, err := json.Marshal(map[string]any{"event": "egressd.alert", "time": time.Now().UTC(), "attempts": batch, "not_listed": over})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
