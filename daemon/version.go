package daemon

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is what `egressd version` prints and egressd_build_info
// exports, read from the binary's embedded build information.
type BuildInfo struct {
	Version   string // the main module's version (go install @vX), else the -ldflags stamp, else "devel"
	Revision  string // VCS commit, with "+dirty" for a modified tree; "unknown" when not built from a checkout
	Time      string // VCS commit time, "" when unknown
	GoVersion string
}

// version is the release the build says it is, for builds that carry no
// module version (go build in a checkout, the image): deploy/image.sh and
// the Dockerfile set it from the VERSION file with
// -ldflags "-X github.com/egressd/egressd/daemon.version=vX.Y.Z".
var version string

// ReadBuildInfo reads the running binary's build information.
func ReadBuildInfo() BuildInfo {
	info, ok := debug.ReadBuildInfo()
	return buildInfoOf(info, ok, version)
}

// buildInfoOf is ReadBuildInfo on given build information and stamp.
func buildInfoOf(info *debug.BuildInfo, ok bool, stamp string) BuildInfo {
	bi := BuildInfo{Version: "devel", Revision: "unknown"}
	if stamp != "" {
		bi.Version = stamp
	}
	if !ok {
		return bi
	}
	bi.GoVersion = info.GoVersion
	if v := info.Main.Version; v != "" && v != "(devel)" {
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

// String is the one line `egressd version` prints. A build that carries
// neither a version nor a revision says so, and how to get one.
func (b BuildInfo) String() string {
	s := "egressd " + b.Version + " ("
	if b.Version == "devel" {
		s += "unversioned build: deploy/image.sh stamps the VERSION file's; "
	}
	if b.Revision == "unknown" {
		s += "no VCS revision: built outside a git checkout or with -buildvcs=false"
	} else {
		s += "revision " + b.Revision
		if b.Time != "" {
			s += ", " + b.Time
		}
	}
	if b.GoVersion != "" {
		s += ", " + b.GoVersion
	}
	return s + ")"
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
