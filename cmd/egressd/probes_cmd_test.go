package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProbesCommand: `egressd probes` speaks the admin endpoint's
// incident API (list, acknowledge) and reports its answer and status.
func TestProbesCommand(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath())
		if strings.Contains(r.URL.Path, "nobody") {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"acknowledged":false}`))
			return
		}
		w.Write([]byte(`{"incidents":[]}`))
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")
	if _, _, err := net.SplitHostPort(admin); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		req  string
	}{
		{[]string{"--admin", admin, "incidents"}, exitOK, "GET /probes/incidents"},
		{[]string{"--admin", admin, "ack", "agent-a"}, exitOK, "POST /probes/agent-a/ack"},
		{[]string{"--admin", admin, "ack", "nobody"}, exitDeny, "POST /probes/nobody/ack"},
		{[]string{"--admin", admin, "ack"}, exitUsage, ""},
		{[]string{"--admin", admin}, exitUsage, ""},
	}
	for _, tt := range tests {
		got = nil
		var out, errb bytes.Buffer
		if code := cmdProbes(t.Context(), tt.args, &out, &errb); code != tt.code {
			t.Errorf("%v: exit %d, want %d (%s)", tt.args, code, tt.code, errb.String())
		}
		if tt.req != "" && (len(got) != 1 || got[0] != tt.req) {
			t.Errorf("%v: requests %v, want %s", tt.args, got, tt.req)
		}
	}
}
