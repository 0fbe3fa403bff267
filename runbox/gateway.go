package runbox

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"

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
		if _, pp, err := nft.ListenAddr(hp); err == nil {
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

// maxIdentityName bounds `run --identity`.
const maxIdentityName = 64

// WithIdentity is rp with the run's sandbox addresses named identity
// name (`run --identity`): its decisions are logged and counted as name,
// rules naming name apply, and trial runs of one agent add up in the log
// (`egressd suggest --identity NAME`), instead of each run being a fresh
// source address. An identity of that name in the config keeps its
// evaluation mark; the config's own policy is not changed.
func WithIdentity(rp *policy.Policy, name string, addrs []netip.Addr) (*policy.Policy, error) {
	switch {
	case name == "" || len(name) > maxIdentityName || strings.IndexFunc(name, badIdentityRune) >= 0:
		return nil, fmt.Errorf("--identity %q: want 1 to %d letters, digits, '.', '_' or '-'", name, maxIdentityName)
	case policy.IsProbeIdentity(name):
		return nil, fmt.Errorf("--identity %q: that name labels egressd's own probe traffic", name)
	}
	id := policy.Identity{Name: name, Evaluation: rp.Evaluation(name)}
	for _, a := range addrs {
		if a.IsValid() {
			id.CIDRs = append(id.CIDRs, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	q := *rp
	// First: Identity takes the first identity whose cidrs hold a source.
	q.Identities = append([]policy.Identity{id}, rp.Identities...)
	return &q, nil
}

func badIdentityRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}
