package daemon

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is what `egressd version` prints and egressd_build_info
// exports, read from the binary's embedded build information.
type BuildInfo struct {
	Version   string // the main module's version: a tag, or "(devel)"
	Revision  string // VCS commit, with "+dirty" for a modified tree; "unknown" when not built from a checkout
	Time      string // VCS commit time, "" when unknown
	GoVersion string
}

// ReadBuildInfo reads the running binary's build information.
func ReadBuildInfo() BuildInfo {
	bi := BuildInfo{Version: "(devel)", Revision: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	bi.GoVersion = info.GoVersion
	if v := info.Main.Version; v != "" {
		bi.Version = v
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			bi.Revision = s.Value
		case "vcs.time":
			bi.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		bi.Revision += "+dirty"
	}
	return bi
}

// String is the one line `egressd version` prints.
func (b BuildInfo) String() string {
	s := "egressd " + b.Version + " (revision " + b.Revision
	if b.Time != "" {
		s += ", " + b.Time
	}
	return s + ", " + b.GoVersion + ")"
}

// buildInfoGauge is egressd_build_info: always 1, labelled with the build.
func buildInfoGauge(b BuildInfo) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "egressd_build_info",
		Help: "Always 1; the labels say which egressd build is running.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	return g
}
