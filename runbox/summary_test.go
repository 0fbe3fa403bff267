package runbox

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestLogHandler: decisions and DNS lines reach the log file only, and are
// counted (a probe's are not); egressd's own warnings reach the terminal.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	var file, term, out bytes.Buffer
	sum := &summary{}
	log := slog.New(&logHandler{
		file: slog.NewJSONHandler(&file, &slog.HandlerOptions{Level: slog.LevelInfo}),
		term: slog.NewJSONHandler(&term, &slog.HandlerOptions{Level: slog.LevelWarn}),
		sum:  sum,
	}).With("component", "proxy")
	log.Info("decision", "method", "GET", "host", "a.test", "decision", "allow", "reason", "allowed")
	log.Info("decision", "method", "CONNECT", "host", "a.test", "decision", "allow", "reason", "allowed", "detail", "tunnel inspected")
	log.Warn("decision", "method", "POST", "host", "b.test", "decision", "deny", "reason", "mirror")
	log.Warn("decision", "method", "POST", "host", "b.test", "decision", "deny", "reason", "mirror")
	log.Warn("dns query", "qname", "c.test.", "result", "nxdomain")
	sum.hold(func() { log.Warn("decision", "host", "probe.test", "decision", "deny", "reason", "no-rule") })
	// a probe's line logged after its hold (a tunnel's close): its identity says whose it is
	log.Warn("decision", "identity", "egressd-selftest", "host", "probe.test", "decision", "deny", "reason", "no-rule")
	log.Warn("walls drifted")
	if strings.Contains(term.String(), "decision") || strings.Contains(term.String(), "dns query") {
		t.Errorf("decision or DNS lines on the terminal:\n%s", term.String())
	}
	if !strings.Contains(term.String(), "walls drifted") {
		t.Errorf("egressd's own warning missing from the terminal:\n%s", term.String())
	}
	if n := strings.Count(file.String(), "\n"); n != 8 {
		t.Errorf("log file has %d lines, want 8:\n%s", n, file.String())
	}
	sum.write(&out, "/x/run.log")
	want := "egressd run: 1 requests allowed, 2 denied (every decision: /x/run.log)\n  denied b.test: mirror (2)\n"
	if !strings.HasPrefix(out.String(), want) || strings.Contains(out.String(), "probe.test") {
		t.Errorf("summary:\n%s\nwant prefix:\n%s", out.String(), want)
	}
	// a honeytoken refusal is named as what it is, not as a host to allow
	log.Warn("decision", "method", "GET", "host", "d.test", "decision", "deny", "reason", "honeytoken")
	out.Reset()
	sum.write(&out, "/x/run.log")
	if !strings.Contains(out.String(), "1 request(s) carried a honeytoken") {
		t.Errorf("summary does not name the honeytoken:\n%s", out.String())
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	host := []string{"PATH=/bin", "HOME=/h", "MY_API_TOKEN=s", "GITHUB_PAT=p", "FOO=bar", "HTTP_PROXY=http://evil:1", "NO_PROXY=*"}
	proxy := mustAP("10.0.0.1:3128")
	tests := []struct {
		name       string
		clean      bool
		keep       []string
		has, lacks []string
		suspicious []string
	}{
		{"default", false, nil, []string{"FOO=bar", "MY_API_TOKEN=s", "NO_PROXY=" + noProxy, "HTTP_PROXY=http://10.0.0.1:3128", "NODE_USE_ENV_PROXY=1", "CARGO_HTTP_CAINFO=/b"}, []string{"HTTP_PROXY=http://evil:1", "NO_PROXY=*"}, []string{"MY_API_TOKEN", "GITHUB_PAT"}},
		{"kept credential is not warned about", false, []string{"MY_API_TOKEN"}, []string{"MY_API_TOKEN=s"}, nil, []string{"GITHUB_PAT"}},
		{"clean", true, nil, []string{"PATH=/bin", "HOME=/h", "SSL_CERT_FILE=/b"}, []string{"FOO=bar", "MY_API_TOKEN=s", "GITHUB_PAT=p"}, nil},
		{"clean with --env", true, []string{"FOO"}, []string{"FOO=bar"}, []string{"MY_API_TOKEN=s"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, sus := Env(host, tt.clean, tt.keep, proxy, "/b", "/b.jks")
			joined := "\n" + strings.Join(env, "\n") + "\n"
			for _, h := range tt.has {
				if !strings.Contains(joined, "\n"+h+"\n") {
					t.Errorf("missing %s", h)
				}
			}
			for _, l := range tt.lacks {
				if strings.Contains(joined, "\n"+l+"\n") {
					t.Errorf("has %s", l)
				}
			}
			if strings.Join(sus, ",") != strings.Join(tt.suspicious, ",") {
				t.Errorf("suspicious: got %v, want %v", sus, tt.suspicious)
			}
		})
	}
}

// TestEnvJavaTrustStore: JAVA_TOOL_OPTIONS names the JKS trust store, its
// type and password; a path JAVA_TOOL_OPTIONS cannot carry is left out.
func TestEnvJavaTrustStore(t *testing.T) {
	t.Parallel()
	proxy := mustAP("10.0.0.1:3128")
	for _, tt := range []struct {
		store string
		want  bool
	}{{"/tmp/egressd-run-1/java-truststore.jks", true}, {"/tmp/my dir/t.jks", false}, {"", false}} {
		env, _ := Env(nil, false, nil, proxy, "/b", tt.store)
		var opts string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
				opts = v
			}
		}
		if !strings.Contains(opts, "-Dhttps.proxyHost=10.0.0.1 -Dhttps.proxyPort=3128") {
			t.Errorf("%q: no proxy in JAVA_TOOL_OPTIONS: %s", tt.store, opts)
		}
		want := "-Djavax.net.ssl.trustStore=" + tt.store + " -Djavax.net.ssl.trustStoreType=JKS -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword
		if got := strings.Contains(opts, "trustStore"); got != tt.want || tt.want && !strings.Contains(opts, want) {
			t.Errorf("%q: JAVA_TOOL_OPTIONS=%s", tt.store, opts)
		}
	}
}

// TestSummaryNPMAudit (issue 23): a refused npm audit is named in the
// summary, with why and how to turn it off.
func TestSummaryNPMAudit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		detail string
		want   bool
	}{{"npm audit: /-/npm/v1/security/", true}, {"npm publish: PUT /<pkg>", false}} {
		var out bytes.Buffer
		sum := &summary{}
		log := slog.New(&logHandler{file: slog.NewJSONHandler(io.Discard, nil), term: slog.DiscardHandler, sum: sum})
		log.Warn("decision", "method", "POST", "host", "registry.example", "decision", "deny", "reason", "mirror", "detail", tc.detail)
		sum.write(&out, "/x/run.log")
		if got := strings.Contains(out.String(), "audit=false"); got != tc.want {
			t.Errorf("%s: summary mentions audit=false: %v, want %v\n%s", tc.detail, got, tc.want, out.String())
		}
	}
}
