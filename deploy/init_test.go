package deploy_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/presets"
)

// initPolicy is what `egressd init --sandbox kind` writes, parsed.
func initPolicy(t *testing.T, kind string) (*policy.Policy, string) {
	t.Helper()
	b, err := presets.Render(presets.Options{Presets: []string{"pypi"}, Sandbox: kind, UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(strings.NewReader(string(b)), "init --sandbox "+kind)
	if err != nil {
		t.Fatal(err)
	}
	return p, string(b)
}

// sameSandboxSide reports how a and b differ in where egressd listens
// and how sandbox traffic is recognised: the part of a config a
// deployment's wiring depends on.
func sameSandboxSide(a, b *policy.Policy) []string {
	var diff []string
	if a.Listen != b.Listen {
		diff = append(diff, "listen")
	}
	if a.Sandbox.InterfacePrefix != b.Sandbox.InterfacePrefix || a.Sandbox.Pool4 != b.Sandbox.Pool4 || a.Sandbox.Pool6 != b.Sandbox.Pool6 {
		diff = append(diff, "sandbox.interface_prefix/pool4/pool6")
	}
	if !slices.Equal(a.Sandbox.CIDRs, b.Sandbox.CIDRs) || !slices.Equal(a.Sandbox.UIDs, b.Sandbox.UIDs) {
		diff = append(diff, "sandbox.cidrs/uids")
	}
	return diff
}

// TestInitKubernetesIsTheManifests: `init --sandbox kubernetes` listens
// where the DaemonSet's ConfigMap does (the node-local address on
// hostNetwork, not a ClusterIP) and walls the same interfaces.
func TestInitKubernetesIsTheManifests(t *testing.T) {
	objs, err := parseManifests(loadManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	var cm *policy.Policy
	for _, o := range objs {
		if o.Kind != "ConfigMap" || o.Metadata.Name != "egressd-config" {
			continue
		}
		var d struct{ Data map[string]string }
		if err := o.node.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if cm, err = policy.Parse(strings.NewReader(d.Data["egressd.yaml"]), o.file); err != nil {
			t.Fatal(err)
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap egressd-config among the manifests")
	}
	p, text := initPolicy(t, "kubernetes")
	if d := sameSandboxSide(p, cm); len(d) > 0 {
		t.Errorf("init --sandbox kubernetes differs from deploy/kubernetes's ConfigMap in %v:\ninit: %+v %+v\nmanifest: %+v %+v", d, p.Listen, p.Sandbox, cm.Listen, cm.Sandbox)
	}
	if strings.Contains(text, "by its ClusterIP") {
		t.Error("init --sandbox kubernetes still says pods reach egressd by a ClusterIP")
	}
}

// dockerExample is the Docker walls example of a doc: the sandbox bridge
// and what its containers are told.
var dockerExample = regexp.MustCompile(`docker network create --subnet (\S+) --gateway (\S+) \\\s*-o com\.docker\.network\.bridge\.name=(\S+) (\S+)(?s:.*?)--network (\S+) --dns (\S+) \\\s*-e HTTPS_PROXY=http://(\S+) `)

// TestInitDockerIsTheDocs: `init --sandbox docker` writes the config the
// documents' Docker example runs: egressd on the sandbox bridge's gateway,
// sandboxes recognised by the bridge's interface (not by a source address,
// which a container can spoof), in every doc that shows the example.
func TestInitDockerIsTheDocs(t *testing.T) {
	p, _ := initPolicy(t, "docker")
	docs, _ := filepath.Glob("../docs/*.md")
	docs = append(docs, "../README.md")
	found := 0
	for _, f := range docs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range dockerExample.FindAllStringSubmatch(string(b), -1) {
			found++
			subnet, gw, bridge, network, runNet, dns, proxy := m[1], m[2], m[3], m[4], m[5], m[6], m[7]
			if runNet != network {
				t.Errorf("%s: the sandbox runs on network %s, the example creates %s", f, runNet, network)
			}
			if p.Listen.Proxy != gw+":3128" || proxy != p.Listen.Proxy {
				t.Errorf("%s: init listens on %s; the example's gateway is %s and its containers use the proxy %s", f, p.Listen.Proxy, gw, proxy)
			}
			if p.Listen.DNS != dns+":53" {
				t.Errorf("%s: init's DNS is %s; the example's containers use %s", f, p.Listen.DNS, dns)
			}
			if pre := p.Sandbox.InterfacePrefix; pre == "" || !strings.HasPrefix(bridge, pre) {
				t.Errorf("%s: init's sandbox.interface_prefix %q does not cover the example's bridge %s", f, pre, bridge)
			}
			if len(p.Sandbox.CIDRs) > 0 {
				t.Errorf("%s: init recognises sandboxes by source CIDRs %v, which a container can spoof; the example walls the bridge %s", f, p.Sandbox.CIDRs, bridge)
			}
			if pr, err := netip.ParsePrefix(subnet); err != nil || !pr.Contains(netip.MustParseAddr(gw)) {
				t.Errorf("%s: the gateway %s is not in the subnet %s", f, gw, subnet)
			}
		}
	}
	if found == 0 {
		t.Fatal("no doc shows the Docker walls example (docker network create … HTTPS_PROXY=…)")
	}
}
