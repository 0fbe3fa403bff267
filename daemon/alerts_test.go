package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/proxy"
)

// TestAlerterBatchesAndNeverBlocks: attempts go to the webhook in one POST
// per window (at most maxAlertBatch listed, the rest counted), and a hung
// webhook never blocks the caller: the queue fills and drops, counted.
func TestAlerterBatchesAndNeverBlocks(t *testing.T) {
	t.Parallel()
	posts := make(chan map[string]any, 8)
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		json.NewDecoder(r.Body).Decode(&v)
		posts <- v
		<-release // hang until the test is done
	}))
	defer hook.Close()
	defer close(release)
	a := newAlerter(slog.New(slog.DiscardHandler), func() (string, time.Duration) { return hook.URL, 50 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	for range 150 {
		a.attempt(proxy.Attempt{Identity: "agent", Host: "169.254.169.254", HighRisk: true})
	}
	var first map[string]any
	select {
	case first = <-posts:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook post")
	}
	if n := len(first["attempts"].([]any)); n != maxAlertBatch || first["not_listed"].(float64) != 50 {
		t.Errorf("first batch: %d listed, %v not listed; want %d and 50", n, first["not_listed"], maxAlertBatch)
	}
	// the webhook now hangs: the request path must not
	start := time.Now()
	for range 3 * alertQueue {
		a.attempt(proxy.Attempt{Identity: "eval-1", Evaluation: true})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d attempts with a hung webhook took %v", 3*alertQueue, d)
	}
	if n := gatherCounter(t, a.dropped); n < float64(alertQueue) {
		t.Errorf("dropped %v, want at least %d", n, alertQueue)
	}
}

func gatherCounter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
