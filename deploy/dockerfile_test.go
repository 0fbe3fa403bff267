package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// repo is the repository root, relative to this package.
const repo = ".."

func readRepo(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{start, strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// execForm parses a JSON-array argument (exec form); nil if it is not one.
func execForm(s string) []string {
	var v []string
	if json.Unmarshal([]byte(s), &v) != nil {
		return nil
	}
	return v
}

// flagsAndRest splits leading --flag=value words from an instruction.
func flagsAndRest(args string) (map[string]string, string) {
	flags := map[string]string{}
	for strings.HasPrefix(args, "--") {
		word, rest, _ := strings.Cut(args, " ")
		k, v, _ := strings.Cut(strings.TrimPrefix(word, "--"), "=")
		flags[k] = v
		args = strings.TrimSpace(rest)
	}
	return flags, args
}

// pinned reports whether an image reference names a tag or digest other
// than latest.
func pinned(image string) error {
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok || tag == "":
		return fmt.Errorf("image %q has no tag (an implicit latest)", image)
	case tag == "latest":
		return fmt.Errorf("image %q uses the latest tag", image)
	}
	return nil
}

// dockerfileFacts is what checkDockerfile learned, for cross-checks.
type dockerfileFacts struct {
	builder    string // the builder image
	sedExpr    string // the sed expression that derives the image's config
	cmd        []string
	healthURL  string
	exposed    []string
	configPath string
}

var urlRe = regexp.MustCompile(`(?i)\b(https?|ftp|git)://|git@`)

// checkDockerfile returns every structural problem of a Dockerfile.
func checkDockerfile(src string) (dockerfileFacts, []error) {
	var f dockerfileFacts
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	ins := parseDockerfile(src)

	var stages []string // aliases, "" when none
	var final []instruction
	cgo, trimpath, stripped := false, false, false
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			_, rest := flagsAndRest(in.args)
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				bad("line %d: FROM without an image", in.line)
				continue
			}
			image, alias := fields[0], ""
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				alias = fields[2]
			}
			if !slices.Contains(stages, image) {
				if err := pinned(image); err != nil {
					bad("line %d: %v", in.line, err)
				}
			}
			if len(stages) == 0 {
				f.builder = image
			}
			stages = append(stages, alias)
			final = nil
		case "ADD":
			if urlRe.MatchString(in.args) {
				bad("line %d: ADD of a URL (%s): fetch nothing unverified at build time", in.line, in.args)
			}
		case "ENV":
			if regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(in.args) {
				cgo = true
			}
		case "RUN":
			if strings.Contains(in.args, "go build") {
				trimpath = strings.Contains(in.args, "-trimpath")
				stripped = regexp.MustCompile(`-ldflags=["']-s -w[ "']`).MatchString(in.args)
				if strings.Contains(in.args, "CGO_ENABLED=0") {
					cgo = true
				}
			}
			if m := regexp.MustCompile(`sed '(s/[^']*/)' configs/default\.yaml`).FindStringSubmatch(in.args); m != nil {
				f.sedExpr = m[1]
			}
		case "COPY":
			flags, _ := flagsAndRest(in.args)
			if from, ok := flags["from"]; ok && !slices.Contains(stages, from) {
				bad("line %d: COPY --from=%s names no earlier stage", in.line, from)
			}
		}
		final = append(final, in)
	}
	if len(stages) < 2 {
		bad("%d stage(s): want a builder stage and a runtime stage", len(stages))
	}
	if !cgo {
		bad("CGO_ENABLED=0 is not set for the build: the binary must be static")
	}
	if !trimpath || !stripped {
		bad(`the go build lacks -trimpath or -ldflags="-s -w"`)
	}
	var copied []string
	user := ""
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "COPY":
			_, rest := flagsAndRest(in.args)
			if w := strings.Fields(rest); len(w) >= 2 {
				copied = append(copied, w[len(w)-1])
			}
		case "HEALTHCHECK":
			_, rest := flagsAndRest(in.args)
			argv := execForm(strings.TrimSpace(strings.TrimPrefix(rest, "CMD")))
			if len(argv) < 3 || argv[0] != "/egressd" || argv[1] != "healthcheck" || !strings.HasSuffix(argv[len(argv)-1], "/readyz") {
				bad("line %d: HEALTHCHECK %q: want CMD [\"/egressd\", \"healthcheck\", ..., \"http://…/readyz\"] (the image has no shell or curl)", in.line, rest)
			} else {
				f.healthURL = argv[len(argv)-1]
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				f.exposed = append(f.exposed, strings.TrimSuffix(p, "/tcp"))
			}
		case "ENTRYPOINT":
			if ep := execForm(in.args); len(ep) != 1 || ep[0] != "/egressd" {
				bad("line %d: ENTRYPOINT %s: want [\"/egressd\"]", in.line, in.args)
			}
		case "CMD":
			f.cmd = execForm(in.args)
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		bad("the final stage runs as %q: set a non-root USER (proxy-only mode needs no privilege)", user)
	}
	if f.healthURL == "" && !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), "HEALTHCHECK") }) {
		bad("the final stage has no HEALTHCHECK")
	}
	for _, p := range []string{"3128", "9090"} {
		if !slices.Contains(f.exposed, p) {
			bad("EXPOSE lacks %s", p)
		}
	}
	if len(f.cmd) == 0 || f.cmd[0] != "serve" {
		bad("CMD %q: want the exec form [\"serve\", ...]", f.cmd)
	}
	if i := slices.Index(f.cmd, "--config"); i >= 0 && i+1 < len(f.cmd) {
		f.configPath = f.cmd[i+1]
		if !slices.Contains(copied, f.configPath) {
			bad("CMD reads --config %s, which no COPY of the final stage puts there", f.configPath)
		}
	} else {
		bad("CMD %q does not name the image's --config", f.cmd)
	}
	return f, errs
}

func TestDockerfile(t *testing.T) {
	src := string(readRepo(t, "Dockerfile"))
	f, errs := checkDockerfile(src)
	for _, err := range errs {
		t.Error(err)
	}

	// The builder's Go is at least go.mod's.
	m := regexp.MustCompile(`^golang:(\d+)\.(\d+)\.(\d+)-`).FindStringSubmatch(f.builder)
	gm := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)(?:\.(\d+))?$`).FindStringSubmatch(string(readRepo(t, "go.mod")))
	if m == nil || gm == nil {
		t.Fatalf("builder %q or go.mod's go line not understood", f.builder)
	}
	ver := func(s []string) int {
		n := 0
		for _, p := range s[1:4] {
			v, _ := strconv.Atoi(p)
			n = n*1000 + v
		}
		return n
	}
	if ver(m) < ver(gm) {
		t.Errorf("builder %s is older than go.mod's go %s.%s", f.builder, gm[1], gm[2])
	}

	// The image's config: default.yaml through the Dockerfile's sed, which
	// must parse and listen where EXPOSE and HEALTHCHECK say.
	if f.sedExpr == "" {
		t.Fatal("no `sed 's/…/…/' configs/default.yaml` deriving the image's config")
	}
	parts := strings.Split(f.sedExpr, "/")
	if len(parts) != 4 {
		t.Fatalf("sed expression %q: want s/RE/REPL/", f.sedExpr)
	}
	re := regexp.MustCompile(parts[1]) // sed's basic RE, as written here, reads the same in Go
	derived := re.ReplaceAllLiteral(readRepo(t, "configs/default.yaml"), []byte(parts[2]))
	p, err := policy.Parse(bytes.NewReader(derived), "image:"+f.configPath)
	if err != nil {
		t.Fatalf("the image's config does not parse: %v", err)
	}
	for key, hp := range map[string]string{"proxy": p.Listen.Proxy, "dns": p.Listen.DNS, "admin": p.Listen.Admin} {
		ap, err := netip.ParseAddrPort(hp)
		if err != nil || !ap.Addr().IsUnspecified() {
			t.Errorf("image config listen.%s = %q: want all addresses (a loopback listener is unreachable through -p)", key, hp)
			continue
		}
		port := strconv.Itoa(int(ap.Port()))
		if key != "dns" && !slices.Contains(f.exposed, port) {
			t.Errorf("listen.%s port %s is not EXPOSEd (%v)", key, port, f.exposed)
		}
		if key == "dns" && (!slices.Contains(f.exposed, port+"/udp") || !slices.Contains(f.exposed, port)) {
			t.Errorf("listen.dns port %s is not EXPOSEd for udp and tcp (%v)", port, f.exposed)
		}
		if key == "admin" {
			if u, err := url.Parse(f.healthURL); err != nil || u.Port() != port {
				t.Errorf("HEALTHCHECK %s does not use listen.admin's port %s", f.healthURL, port)
			}
		}
	}
}

// TestDockerfileChecksFail: each rule of checkDockerfile fires on a
// Dockerfile that breaks it (the checks can fail).
func TestDockerfileChecksFail(t *testing.T) {
	good := string(readRepo(t, "Dockerfile"))
	tests := []struct {
		name, old, new, want string
	}{
		{"latest builder", "golang:1.26.8-bookworm", "golang:latest", "latest tag"},
		{"untagged runtime", "gcr.io/distroless/static-debian12:nonroot", "gcr.io/distroless/static-debian12", "no tag"},
		{"ADD of a URL", "COPY go.mod go.sum ./", "ADD https://example.com/x.tgz /x", "ADD of a URL"},
		{"root user", "USER 65532:65532", "USER root", "non-root USER"},
		{"no user", "USER 65532:65532", "", "non-root USER"},
		{"no healthcheck", "HEALTHCHECK", "# HEALTHCHECK", "no HEALTHCHECK"},
		{"shell-form healthcheck", `CMD ["/egressd", "healthcheck", "--timeout", "4s", "http://127.0.0.1:9090/readyz"]`, "CMD curl -f http://127.0.0.1:9090/readyz", "HEALTHCHECK"},
		{"cgo on", "CGO_ENABLED=0", "CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"no trimpath", "-trimpath ", "", "-trimpath"},
		{"one stage", "FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build", "", "stage"},
		{"unknown stage", "COPY --from=build /out/egressd /egressd", "COPY --from=builder /out/egressd /egressd", "names no earlier stage"},
		{"config not copied", "/out/egressd.yaml /etc/egressd/egressd.yaml", "/out/egressd.yaml /etc/egressd/other.yaml", "no COPY of the final stage"},
		{"metrics not exposed", "EXPOSE 3128 9090", "EXPOSE 3128", "EXPOSE lacks 9090"},
		{"shell entrypoint", `ENTRYPOINT ["/egressd"]`, "ENTRYPOINT /egressd", "ENTRYPOINT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("the Dockerfile no longer contains %q: update this test", tt.old)
			}
			_, errs := checkDockerfile(strings.Replace(good, tt.old, tt.new, 1))
			if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tt.want) }) {
				t.Errorf("got %v, want an error containing %q", errs, tt.want)
			}
		})
	}
}

// dockerignored reports whether a context path is excluded, for the pattern
// forms .dockerignore uses here (no "!" exceptions).
func dockerignored(patterns []string, p string) bool {
	for _, pat := range patterns {
		anyDepth := strings.HasPrefix(pat, "**/")
		pat = strings.TrimPrefix(pat, "**/")
		segs := strings.Split(p, "/")
		for i := range segs {
			// p or any parent directory of it, anchored at the root or, for
			// "**/", at any depth
			for j := i + 1; j <= len(segs); j++ {
				if i > 0 && !anyDepth {
					break
				}
				if ok, _ := path.Match(pat, strings.Join(segs[i:j], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

func TestDockerignore(t *testing.T) {
	var patterns []string
	for _, l := range strings.Split(string(readRepo(t, ".dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf("exception %q: extend dockerignored() first", l)
			}
			patterns = append(patterns, l)
		}
	}
	// The build reads every non-test Go file of the module and go.mod/go.sum.
	var need []string
	filepath.WalkDir(repo, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(repo, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == ".git" || strings.HasSuffix(rel, "testdata")) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			need = append(need, rel)
		}
		return nil
	})
	need = append(need, "go.mod", "go.sum", "configs/default.yaml")
	for _, p := range need {
		if dockerignored(patterns, p) {
			t.Errorf("%s is needed by the build but excluded by .dockerignore", p)
		}
	}
	for _, p := range []string{".git/config", "policy.test", "policy/policy.test", "nft/testdata/full.nft", "egressd"} {
		if !dockerignored(patterns, p) {
			t.Errorf("%s should be kept out of the build context", p)
		}
	}
}
