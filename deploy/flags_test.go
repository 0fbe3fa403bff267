package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCommandLinesExist builds egressd and checks that every command line
// the deployment files run names a subcommand and flags egressd has: a
// renamed or removed flag must fail here, not on a node.
func TestCommandLinesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds egressd")
	}
	bin := filepath.Join(t.TempDir(), "egressd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/egressd")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	type cmdline struct {
		where string
		argv  []string // after the binary
	}
	var lines []cmdline
	// Dockerfile: CMD and HEALTHCHECK
	df, _ := checkDockerfile(string(readRepo(t, "Dockerfile")))
	lines = append(lines, cmdline{"Dockerfile CMD", df.cmd})
	for _, in := range parseDockerfile(string(readRepo(t, "Dockerfile"))) {
		if in.cmd == "HEALTHCHECK" {
			_, rest := flagsAndRest(in.args)
			lines = append(lines, cmdline{"Dockerfile HEALTHCHECK", execForm(strings.TrimSpace(strings.TrimPrefix(rest, "CMD")))[1:]})
		}
	}
	// systemd: ExecStartPre and ExecStart
	u, err := parseUnit(string(readRepo(t, "configs/egressd.service")))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ExecStartPre", "ExecStart"} {
		for _, v := range u["Service"][k] {
			lines = append(lines, cmdline{"egressd.service " + k, strings.Fields(v)[1:]})
		}
	}
	// Kubernetes: args of every container running the egressd image
	objs, err := parseManifests(loadManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind != "DaemonSet" {
			continue
		}
		var ds daemonSet
		o.node.Decode(&ds)
		for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
			if strings.Contains(c.Image, "egressd") {
				lines = append(lines, cmdline{o.file + " " + c.Name, c.Args})
			}
		}
	}
	if len(lines) < 6 {
		t.Fatalf("found only %d command lines", len(lines))
	}

	flagRe := regexp.MustCompile(`(?m)^\s+-(\S+)`)
	for _, l := range lines {
		// the subcommand is the words before the first flag
		i := slices.IndexFunc(l.argv, func(a string) bool { return strings.HasPrefix(a, "-") })
		if i <= 0 {
			t.Errorf("%s: %q names no subcommand before its flags", l.where, l.argv)
			continue
		}
		out, _ := exec.Command(bin, append(slices.Clone(l.argv[:i]), "-h")...).CombinedOutput()
		var have []string
		for _, m := range flagRe.FindAllStringSubmatch(string(out), -1) {
			have = append(have, m[1])
		}
		if len(have) == 0 {
			t.Errorf("%s: `egressd %s -h` lists no flags:\n%s", l.where, strings.Join(l.argv[:i], " "), out)
			continue
		}
		for _, a := range l.argv[i:] {
			if name, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(have, strings.SplitN(name, "=", 2)[0]) {
				t.Errorf("%s: egressd %s has no flag %s (it has %v)", l.where, strings.Join(l.argv[:i], " "), a, have)
			}
		}
	}
}
