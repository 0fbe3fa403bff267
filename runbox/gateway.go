package runbox

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
)

// NSPrefix names the namespaces `egressd run` creates; CleanupStale
// removes those whose egressd died.
const NSPrefix = "egr"

// TablePrefix starts the name of each run's wall table: TablePrefix+index.
const TablePrefix = "egressd-run-"

// DefaultRunDir holds the records of live runs (see [Sweep]).
const DefaultRunDir = "/run/egressd/runs"

// DefaultProxyPort is the run's proxy port when listen.proxy names none.
const DefaultProxyPort = 3128

// Policy is the policy a run serves: the config as loaded, with only the
// listen addresses moved to the run's link (gw is its gateway end). Every
// other key is the config's own, and [daemon.NewGateway] consumes it as
// it does for serve. The admin endpoint is off: the run is one command,
// not a service.
//
// Transparent mode is on (unless transparent is false): the sandbox is
// egressd's own namespace, so clients that ignore proxy variables have
// their TCP 443 and 80 redirected to the checkpoint instead of failing.
func Policy(p *policy.Policy, gw netip.Addr, transparent bool) *policy.Policy {
	q := *p
	port := func(hp string, def uint16) string {
		if _, pp, err := daemon.ListenAddr(hp); err == nil {
			def = pp
		}
		return netip.AddrPortFrom(gw, def).String()
	}
	q.Listen = policy.Listen{
		Proxy: port(p.Listen.Proxy, DefaultProxyPort),
		DNS:   netip.AddrPortFrom(gw, 53).String(), // resolv.conf names no port
	}
	if transparent {
		q.Listen.Transparent = port(p.Listen.Transparent, DefaultProxyPort+1)
		q.Listen.TransparentHTTP = port(p.Listen.TransparentHTTP, DefaultProxyPort+2)
	}
	if p.Tools.Listen != "" {
		// the tool endpoint moves with the proxy, and so does the
		// self-test's entry for it
		q.Tools.Listen = port(p.Tools.Listen, DefaultToolsPort)
		q.Selftest.ToolServers = slices.Clone(p.Selftest.ToolServers)
		for i, ts := range q.Selftest.ToolServers {
			if u, err := url.Parse(ts.URL); err == nil && u.Host == p.Tools.Listen {
				u.Host = q.Tools.Listen
				q.Selftest.ToolServers[i].URL = u.String()
			}
		}
	}
	return &q
}

// DefaultToolsPort is the run's tool endpoint port when tools.listen
// names none.
const DefaultToolsPort = 8931

// Spec is the wall of one run: the serve walls for rp (its listen keys on
// the link's gateway address), matched on this run's link only.
func Spec(rp *policy.Policy, table string, link *sandbox.Link) (nft.Spec, error) {
	var gws []netip.Addr
	if link.Gateway6.IsValid() {
		gws = append(gws, link.Gateway6.Addr())
	}
	s, err := daemon.WallSpec(rp, gws...)
	if err != nil {
		return s, fmt.Errorf("run walls: %w", err)
	}
	s.Table = table
	s.IfPrefixes = []string{link.GatewayName}
	s.SourceCIDRs, s.UIDs = nil, nil
	return s, s.Validate()
}

// systemBundles are where Debian, Fedora and Alpine keep the system roots.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
}

func writeCABundle(path string, egressdCA []byte) (string, error) {
	var roots []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			roots = b
			break
		}
	}
	data := append(append(roots, '\n'), egressdCA...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	return path, nil
}
