//go:build linux

package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestServeUpstreamOutageReady: a rule whose host does not resolve (an
// offline machine, a DNS outage for one allowed host) beside a reachable
// positive control: serve becomes ready with no LEAK line, names the
// probes it could not carry out live, and /readyz says sealed. Before,
// the write probes on that rule were LEAK (502 upstream-unreachable) and
// serve never got ready.
func TestServeUpstreamOutageReady(t *testing.T) {
	t.Parallel()
	l := newSTLab(t)
	l.writeConfig(t, "  - name: gone\n    hosts: [gone.test]\n    pages: [read]\n  - name: gonepypi\n    hosts: [gone-pypi.test]\n    mirror: pypi")
	l.until = `"trigger":"boot"` // the boot self-test's verdict line
	l.startServe(t)
	if !strings.Contains(l.serve.logs.String(), `"msg":"self-test sealed"`) {
		t.Fatalf("the boot self-test was not sealed:\n%s", l.serve.logs.String())
	}
	if _, err := l.serve.wait(`"msg":"ready"`); err != nil {
		t.Fatalf("serve did not get ready: %v", err)
	}
	logs := l.serve.logs.String()
	if strings.Contains(logs, `"status":"LEAK"`) || strings.Contains(logs, "found a leak") {
		t.Errorf("an upstream outage was reported as a leak:\n%s", logs)
	}
	for _, want := range []string{`"msg":"self-test probe untestable live","probe":"page-login/gone"`, `"probe":"mirror-publish/gonepypi"`, "untestable live: upstream unreachable; the policy denies it"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	if code, why := l.readyz(t); code != http.StatusOK || !strings.Contains(why, "sealed") || !strings.Contains(why, "untestable live") {
		t.Errorf("/readyz %d %q, want 200 sealed with the untestable probes named", code, why)
	}
}
