package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/testutil"
	"go.yaml.in/yaml/v3"
)

var metricRef = regexp.MustCompile(`egressd_[a-z0-9_]+`)

// unexported lists the egressd metric names expr uses that the code does
// not export (a histogram's _bucket, _sum and _count are its own).
func unexported(expr string, have map[string]bool) []string {
	var bad []string
	for _, m := range metricRef.FindAllString(expr, -1) {
		base := m
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, s); ok && have[b] {
				base = b
			}
		}
		if !have[base] {
			bad = append(bad, m)
		}
	}
	return bad
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Expr string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

// TestAlertRules: the alerting rules cover each failure the issue names,
// each has a severity and a summary, and every metric they use is one
// egressd exports. (`promtool check rules` and `promtool test rules`
// run in .ci/run.)
func TestAlertRules(t *testing.T) {
	have := testutil.ExportedMetrics(t, "..")
	b, err := os.ReadFile("prometheus/egressd-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if bad := unexported(r.Expr, have); len(bad) > 0 {
				t.Errorf("%s uses %v, which egressd does not export", r.Alert, bad)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s has no severity or no summary", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"EgressdNotReady", "EgressdLeakFound", "EgressdProbeLeak", "EgressdProbeOverdue",
		"EgressdHighRiskAttempts", "EgressdAuditUnavailable", "EgressdWallsDrift", "EgressdAlertsDropped",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
	tb, err := os.ReadFile("prometheus/egressd-alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(tb), "alertname: "+a+"\n") {
			t.Errorf("egressd-alerts_test.yaml has no firing case for %s", a)
		}
	}
}

// TestDashboard: the Grafana dashboard is valid JSON and every query in
// it names only metrics egressd exports (and the scrape's own up).
func TestDashboard(t *testing.T) {
	have := testutil.ExportedMetrics(t, "..")
	b, err := os.ReadFile("grafana/egressd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard %q has %d panels", d.Title, len(d.Panels))
	}
	exprs := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs++
			if !metricRef.MatchString(q.Expr) && !strings.Contains(q.Expr, `up{job="egressd"`) {
				t.Errorf("panel %q: %q uses no egressd metric", p.Title, q.Expr)
			}
			if bad := unexported(q.Expr, have); len(bad) > 0 {
				t.Errorf("panel %q uses %v, which egressd does not export", p.Title, bad)
			}
		}
	}
	for _, v := range d.Templating.List {
		if bad := unexported(v.Query, have); len(bad) > 0 {
			t.Errorf("variable %s uses %v, which egressd does not export", v.Name, bad)
		}
	}
	t.Logf("%d panels, %d queries", len(d.Panels), exprs)
}
