package daemon

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestBuildInfoMetric: /metrics says which build runs.
func TestBuildInfoMetric(t *testing.T) {
	f := start(t)
	resp, err := http.Get("http://" + f.d.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bi := ReadBuildInfo()
	want := `egressd_build_info{goversion="` + runtime.Version() + `",revision="` + bi.Revision + `",version="` + bi.Version + `"} 1`
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("/metrics has no %s", want)
	}
	if s := bi.String(); !strings.HasPrefix(s, "egressd "+bi.Version+" (revision ") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("version line %q", s)
	}
}
