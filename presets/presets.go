// Package presets writes a starting config for `egressd init`: allow rules
// for the chosen package ecosystems and sites, listen addresses and
// sandbox settings for the kind of sandbox, and a self-test with a
// positive control and a canary. The output is commented YAML that
// passes `egressd validate`; the operator reviews and edits it.
package presets

import (
	"fmt"
	"slices"
	"strings"

	"github.com/egressd/egressd/policy"
)

// preset is one allow rule with the comment that explains it.
type preset struct {
	comment string
	rule    string // YAML of the rule, indented by 2 (without the leading "- ")
	control string // a URL the positive control can fetch through the rule
	// needsHost: the preset has no built-in host; the operator names the
	// registry (or internal mirror) as name=HOST.
	needsHost string
	// hostControl is the path of the positive control on the named host.
	hostControl string
	// artifactory and nexus are the base_path of a repository of this kind
	// on those products ("" : none shown); the rule shows them commented.
	artifactory, nexus string
}

// A registry run by the company: the same rule with the product's host
// and the repository's base_path (docs/MIRRORS.md has every product).
const repoManagers = "\n    # On Artifactory or Nexus instead, one rule per repository (<repo> is its name):\n" +
	"    #   Artifactory: hosts: [artifactory.example.com]\n    #     base_path: %s\n" +
	"    #   Nexus:       hosts: [nexus.example.com]\n    #     base_path: %s"

var presets = map[string]preset{
	"pypi": {
		comment:     "Python packages, download-only (no upload, no login).",
		rule:        "name: pypi\n    hosts: [pypi.org, files.pythonhosted.org]\n    ports: [443]\n    mirror: pypi",
		control:     "https://pypi.org/simple/",
		artifactory: "/artifactory/api/pypi/<repo>", nexus: "/repository/<repo>",
	},
	"crates": {
		comment: "Rust crates, download-only (no publish).",
		rule:    "name: crates\n    hosts: [crates.io, index.crates.io, static.crates.io]\n    ports: [443]\n    mirror: crates",
		control: "https://index.crates.io/config.json",
	},
	"npm": {
		comment:     "npm packages from the registry you named, download-only (no publish, no login).",
		rule:        "name: npm\n    hosts: [{HOST}]\n    ports: [443]\n    mirror: npm",
		needsHost:   "the npm registry or your internal mirror, e.g. npm=npm.internal.example",
		hostControl: "/npm",
		artifactory: "/artifactory/api/npm/<repo>", nexus: "/repository/<repo>",
	},
	"goproxy": {
		comment:     "Go modules from the module proxy you named, download-only.",
		rule:        "name: goproxy\n    hosts: [{HOST}]\n    ports: [443]\n    mirror: goproxy",
		needsHost:   "the Go module proxy or your internal mirror, e.g. goproxy=goproxy.internal.example",
		hostControl: "/golang.org/x/text/@v/list",
		artifactory: "/artifactory/api/go/<repo>", nexus: "/repository/<repo>",
	},
	"apt": {
		comment:     "Debian or Ubuntu packages from the mirror you named, download-only (apt fetches over plain HTTP too).",
		rule:        "name: apt\n    hosts: [{HOST}]\n    ports: [80, 443]\n    mirror: apt",
		needsHost:   "your Debian or Ubuntu mirror, e.g. apt=deb.internal.example",
		artifactory: "/artifactory/<repo>", nexus: "/repository/<repo>",
	},
	"maven": {
		comment:     "Maven Central, download-only (no deploy).",
		rule:        "name: maven\n    hosts: [repo.maven.apache.org, repo1.maven.org]\n    ports: [443]\n    mirror: maven",
		control:     "https://repo.maven.apache.org/maven2/junit/junit/maven-metadata.xml",
		artifactory: "/artifactory/<repo>", nexus: "/repository/<repo>",
	},
	"rubygems": {
		comment: "Ruby gems, download-only (no push, no API key).",
		rule:    "name: rubygems\n    hosts: [rubygems.org, index.rubygems.org]\n    ports: [443]\n    mirror: rubygems",
		control: "https://index.rubygems.org/info/rake",
	},
	"oci": {
		comment:     "Container images from the registry you named, pull-only (Artifactory and Nexus serve /v2/ at the host root or on the repository's own port: no base_path).",
		rule:        "name: oci\n    hosts: [{HOST}]\n    ports: [443]\n    mirror: oci",
		needsHost:   "your container registry, e.g. oci=registry.internal.example",
		hostControl: "/v2/",
	},
	"git": {
		comment:   "git clone and fetch from the server you named (smart HTTP, no push).",
		rule:      "name: git\n    hosts: [{HOST}]\n    ports: [443]\n    mirror: git",
		needsHost: "your git server, e.g. git=git.internal.example",
	},
	"generic": {
		comment:     "Files from the server you named: GET and HEAD, no query, no upload.",
		rule:        "name: generic\n    hosts: [{HOST}]\n    ports: [443]\n    mirror: generic",
		needsHost:   "your file server, e.g. generic=files.internal.example",
		artifactory: "/artifactory/<repo>", nexus: "/repository/<repo>",
	},
	"github-read": {
		comment: "GitHub: clone and fetch (git smart HTTP, no push), and raw files and archives, read-only.",
		rule: "name: github-git\n    hosts: [github.com]\n    ports: [443]\n    mirror: git\n" +
			"  - name: github-files\n    hosts: [raw.githubusercontent.com, codeload.github.com, objects.githubusercontent.com]\n    ports: [443]\n    pages: [read, download]\n    methods: [GET, HEAD]",
	},
	"docs": {
		comment: "Documentation sites, read-only (GET and HEAD).",
		rule: "name: docs\n    hosts:\n      - docs.python.org\n      - docs.rs\n      - doc.rust-lang.org\n      - pkg.go.dev\n      - go.dev\n      - developer.mozilla.org\n" +
			"    ports: [443]\n    pages: [read]\n    methods: [GET, HEAD]",
		control: "https://docs.python.org/3/",
	},
}

// aliases are other names of presets: the distribution, and the language.
var aliases = map[string]string{"debian": "apt", "go": "goproxy"}

// Names lists the presets, for usage text.
func Names() []string {
	out := make([]string, 0, len(presets)+len(aliases))
	for n, p := range presets {
		if p.needsHost != "" {
			n += "=HOST"
		}
		out = append(out, n)
	}
	for a, n := range aliases {
		if presets[n].needsHost != "" {
			a += "=HOST"
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// sandbox is what a sandbox kind changes: where egressd listens and how
// sandbox traffic is recognised.
type sandbox struct {
	comment string
	listen  string
	sandbox string
}

var sandboxes = map[string]sandbox{
	"local": {
		comment: "Local user sandbox: the agent runs as its own uid on this host (or under `egressd run`); the walls send that uid's traffic to egressd only.",
		listen:  "  proxy: 127.0.0.1:3128\n  dns: 127.0.0.1:5353\n  admin: 127.0.0.1:9090",
		sandbox: "  # uids whose traffic the walls confine: the agent's user (`id -u agent`).\n  uids: [{UID}]",
	},
	"docker": {
		comment: "Docker: sandbox containers on their own bridge, whose gateway is egressd (the Docker example in docs/DEPLOYING.md):\n#   docker network create --subnet 10.237.0.0/24 --gateway 10.237.0.1 -o com.docker.network.bridge.name=egsbx0 sandboxes\n# run egressd with --network host, and the sandboxes with --network sandboxes --dns 10.237.0.1\n# -e HTTPS_PROXY=http://10.237.0.1:3128. The walls recognise sandbox traffic by the bridge\n# (interface_prefix), not by a source address, which a container can spoof.",
		listen:  "  proxy: 10.237.0.1:3128\n  dns: 10.237.0.1:53\n  admin: 127.0.0.1:9090",
		sandbox: "  # the bridge of the sandboxes network (egsbx0): every packet arriving on it is sandbox traffic\n  interface_prefix: egsbx\n  pool4: 10.237.0.0/16\n  pool6: fd00:e9e5::/64",
	},
	"kubernetes": {
		comment: "Kubernetes: the hostNetwork DaemonSet of deploy/kubernetes, one egressd per node on the node-local\n# address 169.254.20.11 (a dummy interface, as NodeLocal DNSCache does): sandbox pods set\n# HTTPS_PROXY=http://169.254.20.11:3128 and that nameserver. Not a ClusterIP: DNAT would send\n# them to another node's egressd, which the walls drop. Paste this into deploy/kubernetes/10-configmap.yaml.",
		listen:  "  proxy: 169.254.20.11:3128\n  dns: 169.254.20.11:53\n  # metrics and probes, from the cluster network (the walls drop it from sandbox pods)\n  admin: 0.0.0.0:9090",
		sandbox: "  # name prefix of the node-side interfaces of pod networking: Calico cali, kindnet/ptp veth,\n  # flannel/bridge cni0, AWS VPC CNI eni, Weave weave, Cilium lxc (legacy host routing only)\n  interface_prefix: cali\n  pool4: 10.237.0.0/16\n  pool6: fd00:e9e5::/64",
	},
}

// Options are the choices of `egressd init`.
type Options struct {
	Presets []string // "pypi", "npm=registry.internal.example", ...
	Sandbox string   // local, docker or kubernetes
	UID     uint32   // local: the agent's uid
}

// Render writes the config for o. Errors name the unknown preset or
// sandbox and what is expected; the output always passes policy.Parse
// (Render checks it).
func Render(o Options) ([]byte, error) {
	sb, ok := sandboxes[o.Sandbox]
	if !ok {
		return nil, fmt.Errorf("unknown sandbox kind %q: one of local, docker, kubernetes", o.Sandbox)
	}
	if len(o.Presets) == 0 {
		return nil, fmt.Errorf("no preset: name at least one of %s", strings.Join(Names(), ", "))
	}
	var rules, controls []string
	seen := map[string]bool{}
	for _, spec := range o.Presets {
		name, host, hasHost := strings.Cut(strings.TrimSpace(spec), "=")
		if n, ok := aliases[name]; ok {
			name = n
		}
		p, ok := presets[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("unknown preset %q: one of %s", name, strings.Join(Names(), ", "))
		case seen[name]:
			return nil, fmt.Errorf("preset %q named twice", name)
		case p.needsHost != "" && !hasHost:
			return nil, fmt.Errorf("preset %s needs a host: %s", name, p.needsHost)
		case p.needsHost == "" && hasHost:
			return nil, fmt.Errorf("preset %s takes no host", name)
		}
		seen[name] = true
		rule := p.rule
		if hasHost {
			n, a, err := policy.NormalizeHost(host)
			if err != nil || a.IsValid() || !strings.Contains(n, ".") {
				return nil, fmt.Errorf("preset %s: %q is not a host name", name, host)
			}
			rule = strings.ReplaceAll(rule, "{HOST}", n)
			if p.hostControl != "" {
				p.control = "https://" + n + p.hostControl
			}
		}
		if p.artifactory != "" {
			rule += fmt.Sprintf(repoManagers, p.artifactory, p.nexus)
		}
		rules = append(rules, fmt.Sprintf("  # %s\n  - %s", p.comment, rule))
		if p.control != "" {
			controls = append(controls, p.control)
		}
	}
	sbText := strings.ReplaceAll(sb.sandbox, "{UID}", fmt.Sprint(o.UID))
	var b strings.Builder
	fmt.Fprintf(&b, `# egressd config written by `+"`egressd init --preset %s --sandbox %s`"+`.
# Default deny: only the rules below let traffic out, first match wins.
# Review it, then `+"`egressd validate --config FILE`"+`; try a request with
# `+"`egressd check --config FILE URL`"+`.
version: 1

# %s
listen:
%s

# Empty: the system resolver. Name your resolvers to pin them.
resolver:
  upstreams: []

allow:
%s

deny:
  # what an agent reads in the 403 body when no rule lets it out
  message: "This destination is not allowed from the sandbox: ask the operator to add a rule."
  hosts: []
  cidrs: []

sandbox:
%s

# The self-test proves the walls: every probe below must stay unreachable
# directly from a sandbox, the canary must be refused by the proxy, and the
# positive control must work through it (so a dead proxy is not mistaken
# for a sealed one). Point the canary at a host you control.
selftest:
  interval: 5m
  timeout: 1500ms
  tcp: [1.1.1.1:443, 1.1.1.1:80, 8.8.8.8:53]
  udp: [8.8.8.8:53, 1.1.1.1:53]
  resolvers: [8.8.8.8:53, 1.1.1.1:53]
  metadata: [169.254.169.254, fd00:ec2::254]
  canary_name: egressd-canary.example.com
  canary_url: http://egressd-canary.example.com/
  expect_reachable: [%s]
`, strings.Join(o.Presets, ","), o.Sandbox, sb.comment, sb.listen, strings.Join(rules, "\n"), sbText, strings.Join(controls[:min(1, len(controls))], ", "))
	out := []byte(b.String())
	if _, err := policy.Parse(strings.NewReader(b.String()), "init"); err != nil {
		return nil, fmt.Errorf("presets: generated config does not validate (a bug): %w", err)
	}
	return out, nil
}
