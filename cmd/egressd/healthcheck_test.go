package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthcheckCommand(t *testing.T) {
	// Not parallel: t.Setenv(HTTP_PROXY): the in-process healthcheck must ignore this process's environment.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.Write([]byte("ready\n"))
		case "/redirect":
			http.Redirect(w, r, "/readyz", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: self-test found a leak\n"))
		}
	}))
	defer srv.Close()
	// a port with nothing listening: bind, then close
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/readyz"
	l.Close()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"ready", []string{srv.URL + "/readyz"}, exitOK, ""},
		{"not ready", []string{srv.URL + "/leaky"}, exitDeny, "503 Service Unavailable: not ready: self-test found a leak"},
		{"redirect is not followed", []string{srv.URL + "/redirect"}, exitDeny, "302"},
		{"nothing listening", []string{"--timeout", "2s", closed}, exitDeny, "connection refused"},
		{"not http", []string{"file:///etc/passwd"}, exitUsage, "want an http(s) URL"},
		{"two URLs", []string{srv.URL, srv.URL}, exitUsage, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // must be ignored
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"healthcheck"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("got exit %d, stderr %q; want exit %d, stderr containing %q", code, stderr.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}
