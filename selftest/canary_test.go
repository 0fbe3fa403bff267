package selftest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCanaryLogNamesIdentity: the canary-log probe reports a leak naming
// the identity whose canary token the canary server logged.
func TestCanaryLogNamesIdentity(t *testing.T) {
	tests := []struct {
		name, log string
		status    Status
		detail    string
	}{
		{"clean", "GET /health\n", Pass, ""},
		{"this run", "GET /?egressd-selftest-run1\n", Leak, "this run's canary"},
		{"sandbox b", "query 5d41402abc4b.canary.example.net A\n", Leak, "agent-b (token 5d41402abc4b)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tt.log) }))
			defer srv.Close()
			d := &net.Dialer{}
			r := &runner{token: "egressd-selftest-run1", c: Config{CanaryLog: srv.URL, LogDial: d.DialContext,
				CanaryTokens: map[string]string{"agent-a": "0123456789ab", "agent-b": "5d41402abc4b"}}}
			o := r.canaryLog(context.Background())
			if o.status != tt.status || !strings.Contains(o.detail, tt.detail) {
				t.Errorf("got %s %q, want %s containing %q", o.status, o.detail, tt.status, tt.detail)
			}
		})
	}
}
