package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// imageRepo is the repository the manifests pull and deploy/image.sh tags.
const imageRepo = "ghcr.io/egressd/egressd"

// releaseVersion is the VERSION file: the one home of the release tag.
func releaseVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v) {
		t.Fatalf("VERSION %q is not vMAJOR.MINOR.PATCH", v)
	}
	return v
}

// TestImageTagIsVersion: every egressd image the manifests name is the one
// deploy/image.sh builds: the repository it tags, at the VERSION file's tag;
// and the Dockerfile stamps that version into the binary.
func TestImageTagIsVersion(t *testing.T) {
	v := releaseVersion(t)
	n := 0
	for name, text := range loadManifests(t) {
		for _, m := range regexp.MustCompile(`image:\s*(\S+)`).FindAllStringSubmatch(text, -1) {
			if !strings.Contains(m[1], "egressd") {
				continue
			}
			n++
			if m[1] != imageRepo+":"+v {
				t.Errorf("%s: image %s, want %s:%s (deploy/image.sh builds it from VERSION)", name, m[1], imageRepo, v)
			}
		}
	}
	if n == 0 {
		t.Fatal("no egressd image in the manifests")
	}
	script, err := os.ReadFile("image.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), `${EGRESSD_IMAGE:-`+imageRepo+`}:$version`) {
		t.Errorf("deploy/image.sh does not tag %s:$version", imageRepo)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ARG VERSION=`).Match(df) || !strings.Contains(string(df), "-X github.com/egressd/egressd/daemon.version=${VERSION}") {
		t.Error("the Dockerfile does not stamp ARG VERSION into daemon.version")
	}
	src, err := os.ReadFile("../daemon/version.go")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^var version string$`).Match(src) {
		t.Error("daemon has no `var version string` for the Dockerfile's -X to set")
	}
}

// TestImageScript runs deploy/image.sh with stand-ins for docker, kind and
// k3d on PATH (no daemon needed): it builds the VERSION tag with the
// version as a build argument, loads exactly that image into kind or k3d,
// and refuses an unknown target before building anything.
func TestImageScript(t *testing.T) {
	v := releaseVersion(t)
	image := imageRepo + ":" + v
	for _, tt := range []struct {
		arg  string
		code int
		want []string // the calls, one a line, in order
	}{
		{"", 0, []string{"docker build --build-arg VERSION=" + v + " -t " + image + " ."}},
		{"kind", 0, []string{"docker build --build-arg VERSION=" + v + " -t " + image + " .", "kind load docker-image " + image + " --name kind"}},
		{"k3d", 0, []string{"docker build --build-arg VERSION=" + v + " -t " + image + " .", "k3d image import " + image + " --cluster k3s-default"}},
		{"minikube", 2, nil},
	} {
		t.Run("target "+tt.arg, func(t *testing.T) {
			bin := t.TempDir()
			log := filepath.Join(bin, "calls")
			for _, tool := range []string{"docker", "kind", "k3d"} {
				stub := "#!/bin/sh\necho " + tool + " \"$@\" >> " + log + "\n"
				if err := os.WriteFile(filepath.Join(bin, tool), []byte(stub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"image.sh"}
			if tt.arg != "" {
				args = append(args, tt.arg)
			}
			cmd := exec.Command("/bin/sh", args...)
			cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "EGRESSD_IMAGE=", "DOCKER=", "KIND_CLUSTER=", "K3D_CLUSTER=")
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			calls, _ := os.ReadFile(log)
			var got []string
			if s := strings.TrimSpace(string(calls)); s != "" {
				got = strings.Split(s, "\n")
			}
			if code != tt.code || strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("exit %d (want %d), calls %q, want %q; output %s", code, tt.code, got, tt.want, out)
			}
			if tt.code == 0 && !strings.HasSuffix(strings.TrimSpace(string(out)), image) {
				t.Errorf("output %q does not end with the image name", out)
			}
		})
	}
}
