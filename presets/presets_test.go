package presets

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestRender: every preset under every sandbox kind renders a config that
// parses, with the rules, listen addresses, positive control and canary
// the choice implies.
func TestRender(t *testing.T) {
	all := []string{"pypi", "crates", "npm=npm.internal.example", "go=goproxy.internal.example", "github-read", "docs"}
	for _, kind := range []string{"local", "docker", "kubernetes"} {
		for _, set := range [][]string{all, {"pypi"}, {"github-read"}, {"npm=npm.internal.example"}} {
			t.Run(kind+"/"+strings.Join(set, "+"), func(t *testing.T) {
				b, err := Render(Options{Presets: set, Sandbox: kind, UID: 1234})
				if err != nil {
					t.Fatal(err)
				}
				p, err := policy.Parse(strings.NewReader(string(b)), "init.yaml")
				if err != nil {
					t.Fatalf("%v\n%s", err, b)
				}
				if p.Selftest.CanaryURL == "" || p.Selftest.CanaryName == "" || p.DenyMessage == "" {
					t.Errorf("no canary or deny message:\n%s", b)
				}
				if set[0] != "github-read" && len(p.Selftest.ExpectReachable) != 1 {
					t.Errorf("positive control: %v", p.Selftest.ExpectReachable)
				}
				for _, u := range p.Selftest.ExpectReachable {
					tg, err := policy.ParseURL(u)
					if err != nil {
						t.Fatal(err)
					}
					if d := p.DecideRequest(&tg, "GET", "", 0); !d.Allow {
						t.Errorf("the positive control %s is denied by its own config: %s", u, d.Reason)
					}
				}
				tg, _ := policy.ParseURL(p.Selftest.CanaryURL)
				if d := p.DecideRequest(&tg, "GET", "", 0); d.Allow {
					t.Errorf("the canary %s is allowed", p.Selftest.CanaryURL)
				}
				switch kind {
				case "local":
					if len(p.Sandbox.UIDs) != 1 || p.Sandbox.UIDs[0] != 1234 || p.Listen.Proxy != "127.0.0.1:3128" {
						t.Errorf("local: uids %v proxy %s", p.Sandbox.UIDs, p.Listen.Proxy)
					}
				case "docker":
					if len(p.Sandbox.CIDRs) != 0 || p.Sandbox.InterfacePrefix != "egsbx" || p.Listen.Proxy != "10.237.0.1:3128" {
						t.Errorf("docker: cidrs %v prefix %s proxy %s", p.Sandbox.CIDRs, p.Sandbox.InterfacePrefix, p.Listen.Proxy)
					}
				case "kubernetes":
					if len(p.Sandbox.CIDRs) != 0 || p.Sandbox.InterfacePrefix != "cali" || p.Listen.Proxy != "169.254.20.11:3128" {
						t.Errorf("kubernetes: cidrs %v prefix %s proxy %s", p.Sandbox.CIDRs, p.Sandbox.InterfacePrefix, p.Listen.Proxy)
					}
				}
			})
		}
	}
	b, _ := Render(Options{Presets: all, Sandbox: "local"})
	for _, want := range []string{"name: pypi", "mirror: crates", "hosts: [npm.internal.example]", "mirror: goproxy", "mirror: git", "name: docs", "# Python packages"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %q", want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Presets: []string{"pypi"}, Sandbox: "vm"}, "unknown sandbox kind"},
		{Options{Sandbox: "local"}, "no preset"},
		{Options{Presets: []string{"pip"}, Sandbox: "local"}, `unknown preset "pip"`},
		{Options{Presets: []string{"npm"}, Sandbox: "local"}, "npm needs a host"},
		{Options{Presets: []string{"pypi=x.example"}, Sandbox: "local"}, "takes no host"},
		{Options{Presets: []string{"go=10.0.0.1"}, Sandbox: "local"}, "not a host name"},
		{Options{Presets: []string{"pypi", "pypi"}, Sandbox: "local"}, "named twice"},
	}
	for _, tt := range tests {
		if _, err := Render(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.o, err, tt.want)
		}
	}
}

// TestRenderMirrorKinds (issue 23): every mirror kind has a preset of its
// name (debian and go as aliases), whose rule is that mirror and which
// shows, commented, the base_path an Artifactory or Nexus repository of
// that kind needs where one applies.
func TestRenderMirrorKinds(t *testing.T) {
	for _, m := range append(policy.MirrorNames(), "debian", "go") {
		t.Run(m, func(t *testing.T) {
			spec := m
			if _, err := Render(Options{Presets: []string{m}, Sandbox: "local"}); err != nil && strings.Contains(err.Error(), "needs a host") {
				spec = m + "=repo.internal.example"
			}
			b, err := Render(Options{Presets: []string{spec}, Sandbox: "local"})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"debian": "apt", "go": "goproxy"}[m]
			if want == "" {
				want = m
			}
			if !strings.Contains(string(b), "mirror: "+want+"\n") {
				t.Errorf("no mirror: %s rule:\n%s", want, b)
			}
			switch want {
			case "pypi", "npm", "goproxy", "maven", "apt", "generic":
				for _, ex := range []string{"#     base_path: /artifactory/", "#     base_path: /repository/"} {
					if !strings.Contains(string(b), ex) {
						t.Errorf("no commented %q example:\n%s", ex, b)
					}
				}
				// the example, uncommented, is a valid rule
				var lines []string
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(strings.TrimSpace(l), "#     base_path: /repository/") {
						l = "    base_path: /repository/repo"
					}
					lines = append(lines, l)
				}
				if _, err := policy.Parse(strings.NewReader(strings.Join(lines, "\n")), "init.yaml"); err != nil {
					t.Errorf("with the Nexus base_path uncommented: %v", err)
				}
			}
		})
	}
}
