package selftest

import (
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Targets is the part of a Config that travels: what to probe, without
// the sockets to probe it with. egressd serves it to `egressd probe` inside
// a sandbox (so the sandbox needs no config of its own); the probe fills
// in its own dialers.
type Targets struct {
	TCP             []netip.AddrPort `json:"tcp,omitempty"`
	UDP             []netip.AddrPort `json:"udp,omitempty"`
	ICMP            []netip.Addr     `json:"icmp,omitempty"`
	IPv6            []netip.AddrPort `json:"ipv6,omitempty"`
	Resolvers       []netip.AddrPort `json:"resolvers,omitempty"`
	Metadata        []netip.Addr     `json:"metadata,omitempty"`
	MetadataNames   []string         `json:"metadata_names,omitempty"`
	CanaryName      string           `json:"canary_name,omitempty"`
	CanaryURL       string           `json:"canary_url,omitempty"`
	Unlisted        string           `json:"unlisted,omitempty"`
	SNIHost         string           `json:"sni_host,omitempty"`
	SNIName         string           `json:"sni_name,omitempty"`
	HostTrickURL    string           `json:"host_trick_url,omitempty"`
	HostTrickHost   string           `json:"host_trick_host,omitempty"`
	Refused         []Request        `json:"refused,omitempty"`
	ExpectReachable []string         `json:"expect_reachable,omitempty"`
	Timeout         time.Duration    `json:"timeout_ns,omitempty"`
}

// Targets returns c's targets.
func (c *Config) Targets() Targets {
	return Targets{
		TCP: c.TCP, UDP: c.UDP, ICMP: c.ICMP, IPv6: c.IPv6, Resolvers: c.Resolvers,
		Metadata: c.Metadata, MetadataNames: c.MetadataNames,
		CanaryName: c.CanaryName, CanaryURL: c.CanaryURL, Unlisted: c.Unlisted,
		SNIHost: c.SNIHost, SNIName: c.SNIName, HostTrickURL: c.HostTrickURL, HostTrickHost: c.HostTrickHost,
		Refused: c.Refused, ExpectReachable: c.ExpectReachable, Timeout: c.Timeout,
	}
}

// Config returns a Config probing t; the caller sets the dialers and the
// proxy and resolver addresses.
func (t Targets) Config() Config {
	return Config{
		TCP: t.TCP, UDP: t.UDP, ICMP: t.ICMP, IPv6: t.IPv6, Resolvers: t.Resolvers,
		Metadata: t.Metadata, MetadataNames: t.MetadataNames,
		CanaryName: t.CanaryName, CanaryURL: t.CanaryURL, Unlisted: t.Unlisted,
		SNIHost: t.SNIHost, SNIName: t.SNIName, HostTrickURL: t.HostTrickURL, HostTrickHost: t.HostTrickHost,
		Refused: t.Refused, ExpectReachable: t.ExpectReachable, Timeout: t.Timeout,
	}
}

// Hosts is every host name or address the probes through the proxy name,
// lower-case: what a probe-labelled request may target. Metadata
// addresses are included in every spelling the probes use only as their
// canonical form; the proxy compares the host it parsed.
func (t Targets) Hosts() map[string]bool {
	out := map[string]bool{}
	add := func(h string) {
		if h != "" {
			out[strings.ToLower(strings.Trim(h, "[]"))] = true
		}
	}
	hostOf := func(raw string) {
		if u, err := url.Parse(raw); err == nil {
			add(u.Hostname())
		}
	}
	hostPort := func(hp string) {
		if i := strings.LastIndexByte(hp, ':'); i > 0 {
			hp = hp[:i]
		}
		add(hp)
	}
	for _, a := range t.Metadata {
		add(a.String())
	}
	for _, n := range t.MetadataNames {
		add(n)
	}
	add(t.CanaryName)
	hostOf(t.CanaryURL)
	hostPort(t.Unlisted)
	hostPort(t.SNIHost)
	hostOf(t.HostTrickURL)
	add(t.HostTrickHost)
	for _, r := range t.Refused {
		hostOf(r.URL)
	}
	for _, u := range t.ExpectReachable {
		hostOf(u)
	}
	return out
}
