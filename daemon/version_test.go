package daemon

import (
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildInfoMetric: /metrics says which build runs.
func TestBuildInfoMetric(t *testing.T) {
	t.Parallel()
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
	if s := bi.String(); !strings.HasPrefix(s, "egressd "+bi.Version+" (") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("version line %q", s)
	}
}

// TestBuildInfoStamps: the version comes from the module (go install
// @vX), else from the -ldflags stamp the image's build sets, else says
// it is an unversioned build; a binary without VCS stamping says so in
// words rather than "(devel) (revision unknown)".
func TestBuildInfoStamps(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}
	cases := []struct {
		name    string
		info    *debug.BuildInfo
		stamp   string
		version string
		line    []string // substrings of the version line
	}{
		{"bare go build outside a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "",
			"devel", []string{"egressd devel (unversioned build", "no VCS revision", "go1.26.8)"}},
		{"image build: the ldflags stamp", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "v0.1.0",
			"v0.1.0", []string{"egressd v0.1.0 (", "no VCS revision", "go1.26.8)"}},
		{"go install at a tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}}, "",
			"v0.2.0", []string{"egressd v0.2.0 ("}},
		{"a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "v0.1.0",
			"v0.1.0", []string{"egressd v0.1.0 (revision abc123+dirty, 2026-01-02T03:04:05Z, go1.26.8)"}},
		{"no build info", nil, "", "devel", []string{"egressd devel (unversioned build", "no VCS revision"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bi := buildInfoOf(c.info, c.info != nil, c.stamp)
			if bi.Version != c.version {
				t.Errorf("version %q, want %q", bi.Version, c.version)
			}
			s := bi.String()
			for _, w := range c.line {
				if !strings.Contains(s, w) {
					t.Errorf("version line %q lacks %q", s, w)
				}
			}
			if strings.Contains(s, "(devel)") || strings.Contains(s, "revision unknown") {
				t.Errorf("version line %q", s)
			}
		})
	}
}
