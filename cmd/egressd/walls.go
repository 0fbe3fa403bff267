package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/selftest/probens"
)

func init() { commands["nft"] = cmdNft }

// wallSpec renders the kernel walls for a policy: sandboxes (by interface
// prefix, source CIDRs or uid) may reach only the proxy and DNS ports on
// the addresses egressd listens on. extraGateways adds addresses (a
// sandbox link's gateway end) to those of the listen keys.
func wallSpec(p *policy.Policy, extraGateways ...netip.Addr) (nft.Spec, error) {
	s := nft.Spec{
		IfPrefixes:  []string{p.Sandbox.InterfacePrefix},
		SourceCIDRs: p.Sandbox.CIDRs,
		UIDs:        p.Sandbox.UIDs,
		HighRisk:    p.HighRiskPrefixes(),
		Gateways:    extraGateways,
	}
	proxyAddr, proxyPort, err := probens.ListenAddr(p.Listen.Proxy)
	if err != nil {
		return s, fmt.Errorf("listen.proxy: %w", err)
	}
	s.ProxyPort = proxyPort
	s.Gateways = appendAddr(s.Gateways, proxyAddr)
	if p.Listen.DNS != "" {
		dnsAddr, dnsPort, err := probens.ListenAddr(p.Listen.DNS)
		if err != nil {
			return s, fmt.Errorf("listen.dns: %w", err)
		}
		if dnsAddr != proxyAddr && len(extraGateways) == 0 {
			return s, fmt.Errorf("listen.dns %s and listen.proxy %s must share an address for the walls", p.Listen.DNS, p.Listen.Proxy)
		}
		s.DNSPort = dnsPort
	}
	for _, tr := range []struct {
		hp   string
		from uint16
	}{{p.Listen.Transparent, 443}, {p.Listen.TransparentHTTP, 80}} {
		if tr.hp == "" {
			continue
		}
		a, port, err := probens.ListenAddr(tr.hp)
		if err != nil {
			return s, fmt.Errorf("transparent listener: %w", err)
		}
		if a != proxyAddr {
			return s, fmt.Errorf("transparent listener %s must share the proxy's address %s (the redirect targets the gateway)", tr.hp, proxyAddr)
		}
		s.Redirects = append(s.Redirects, nft.Redirect{From: tr.from, To: port})
	}
	if proxyAddr.IsUnspecified() && len(extraGateways) == 0 {
		return s, errors.New("listen.proxy on an unspecified address: the walls need the concrete gateway address the sandboxes use")
	}
	return s, s.Validate()
}

// wireWalls makes serve own the walls: applied (only if they differ, so
// counters survive) at start and on every reload, read back and repaired
// on a timer.
func wireWalls(opt *daemon.Options) {
	ensure := func(_ context.Context, p *policy.Policy) ([]string, error) {
		s, err := wallSpec(p)
		if err != nil {
			return nil, err
		}
		return nft.Ensure(nft.CurrentNamespace, s)
	}
	opt.Walls = func(ctx context.Context, p *policy.Policy) error {
		_, err := ensure(ctx, p)
		return err
	}
	opt.WallsCheck = ensure
	opt.Collectors = append(opt.Collectors, nft.NewCollector(nft.CurrentNamespace, nft.DefaultTable))
}

func appendAddr(l []netip.Addr, a netip.Addr) []netip.Addr {
	for _, x := range l {
		if x == a {
			return l
		}
	}
	if a.IsUnspecified() {
		return l
	}
	return append(l, a)
}

func cmdNft(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: egressd nft apply|show|down [--config FILE]")
		return exitUsage
	}
	verb := args[0]
	fs := newFlagSet("nft "+verb, stderr)
	cfg := configFlag(fs)
	if pos, err := parseFlags(fs, args[1:]); err != nil || len(pos) > 0 {
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "egressd nft: needs root (CAP_NET_ADMIN)")
		return exitUsage
	}
	switch verb {
	case "apply":
		p, err := loadPolicy(*cfg)
		if err != nil {
			printConfigError(stderr, err)
			return exitUsage
		}
		s, err := wallSpec(p)
		if err != nil {
			fmt.Fprintf(stderr, "egressd nft apply: %v\n", err)
			return exitUsage
		}
		if _, err := nft.Ensure(nft.CurrentNamespace, s); err != nil {
			fmt.Fprintf(stderr, "egressd nft apply: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stdout, "applied table inet %s (stays until `egressd nft down`)\n", s.TableName())
	case "show":
		text, err := nft.Show(nft.CurrentNamespace, nft.DefaultTable)
		if err != nil {
			fmt.Fprintf(stderr, "egressd nft show: %v\n", err)
			return exitUsage
		}
		io.WriteString(stdout, text)
	case "down":
		if err := nft.Down(nft.CurrentNamespace, nft.DefaultTable); err != nil {
			fmt.Fprintf(stderr, "egressd nft down: %v\n", err)
			return exitUsage
		}
		fmt.Fprintf(stdout, "removed table inet %s: sandboxes are no longer walled\n", nft.DefaultTable)
	default:
		fmt.Fprintf(stderr, "egressd nft: unknown verb %q (apply, show, down)\n", verb)
		return exitUsage
	}
	return exitOK
}
