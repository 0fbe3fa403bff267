package runbox

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/sandbox"
)

// DefaultProxyPort is the run's proxy port when listen.proxy names none.
const DefaultProxyPort = 3128

// Policy is the policy a run serves: the config as loaded, with only the
// listen addresses moved to the run's link (gw is its gateway end). Every
// other key is the config's own, and [daemon.NewGateway] consumes it as
// it does for serve. The admin endpoint is off: the run is one command,
// not a service.
func Policy(p *policy.Policy, gw netip.Addr) *policy.Policy {
	q := *p
	port := uint16(DefaultProxyPort)
	if _, pp, err := daemon.ListenAddr(p.Listen.Proxy); err == nil {
		port = pp
	}
	q.Listen = policy.Listen{
		Proxy: netip.AddrPortFrom(gw, port).String(),
		DNS:   netip.AddrPortFrom(gw, 53).String(), // resolv.conf names no port
	}
	return &q
}

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

// Env points every common client at the proxy and at a CA bundle that adds
// egressd's CA to the system roots.
func Env(env []string, proxyURL, bundle string) []string {
	set := map[string]string{
		"HTTP_PROXY": proxyURL, "HTTPS_PROXY": proxyURL, "ALL_PROXY": proxyURL, "NO_PROXY": "",
		"http_proxy": proxyURL, "https_proxy": proxyURL, "all_proxy": proxyURL, "no_proxy": "",
		"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "PIP_CERT": bundle,
		"NODE_EXTRA_CA_CERTS": bundle, "CURL_CA_BUNDLE": bundle, "GIT_SSL_CAINFO": bundle,
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := cutEnv(kv)
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
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
