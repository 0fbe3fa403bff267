package main

import (
	"strings"
	"testing"
)

// TestCheckMethodAsSent: check decides the method string exactly as the
// proxy does (issue 12 item 7d): a lower-case get is not GET.
func TestCheckMethodAsSent(t *testing.T) {
	t.Parallel()
	if code, out, _ := runCmd("check", "--method", "get", "https://pypi.org/simple/requests/"); code != exitDeny {
		t.Errorf("check --method get: exit %d %q, want deny as the proxy", code, out)
	}
}

// TestCheckClassifiesDenials: a high-risk denial still reports what the
// request was (issue 12 item 7a).
func TestCheckClassifiesDenials(t *testing.T) {
	t.Parallel()
	code, out, _ := runCmd("check", "--json", "--method", "POST", "--content-type", "multipart/form-data; boundary=x", "https://upload.pypi.org/legacy/")
	if code != exitDeny || !strings.Contains(out, `"page_type":"publish"`) {
		t.Errorf("upload.pypi.org: exit %d %s, want deny with page_type publish", code, out)
	}
}
