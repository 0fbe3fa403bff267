package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/nft"
	"github.com/egressd/egressd/policy"
)

// Gateway is everything `egressd serve` and `egressd run` build a gateway
// from. Both go through [NewGateway], so a config key one honours the
// other honours too: the proxy (upstream_ca, limits, identities, rules),
// the DNS filter, the walls, the self-test, the audit chain and the
// metrics are assembled here and nowhere else.
//
// Its Options are the daemon's (Load and Logger required); NewGateway
// fills those it builds itself from the fields below (CA, CACheck, Audit,
// HoneytokenDir, the walls and DNSAnswered), and refuses a Gateway that sets them.
type Gateway struct {
	Options
	// StateDir holds the CA (StateDir/ca, created on first use) and the
	// honeytoken store (watched: every token in it is refused).
	StateDir string
	// AuditLog, when set, also appends every decision to this file as a
	// hash-chained line; Close seals it.
	AuditLog string
	// WallsSpec maps a policy to the kernel walls this gateway owns,
	// applied in WallsNS (nft.CurrentNamespace: this one) at start and on
	// every reload and read back every WallsInterval; nil: no walls
	// managed.
	WallsSpec func(*policy.Policy) (nft.Spec, error)
	WallsNS   int
}

// GatewayDaemon is a daemon built by NewGateway; Close releases what the
// builder opened (the audit log's seal; Run's stop seals it already, Close
// covers an early exit).
type GatewayDaemon struct {
	*Daemon
	sink *audit.Sink
}

// Close seals the audit log, if any.
func (g *GatewayDaemon) Close() error {
	if g.sink == nil {
		return nil
	}
	return g.sink.Close()
}

// NewGateway builds the daemon for g.
func NewGateway(g Gateway) (*GatewayDaemon, error) {
	if g.Logger == nil || g.Load == nil {
		return nil, errors.New("gateway: Load and Logger are required")
	}
	if g.CA != nil || g.CACheck != nil || g.Audit != nil || g.HoneytokenDir != "" || g.Walls != nil || g.DNSAnswered != nil {
		return nil, errors.New("gateway: CA, CACheck, Audit, HoneytokenDir, the walls and DNSAnswered are built from StateDir, AuditLog and WallsSpec: set those instead")
	}
	out := &GatewayDaemon{}
	log := g.Logger
	if g.AuditLog != "" {
		// The signing key is read once, at start: a reload does not
		// change it (a key change is a restart, announced by the old key).
		p, err := g.Load()
		if err != nil {
			return nil, err
		}
		ao, err := AuditOptions(p)
		if err != nil {
			return nil, err
		}
		sink, err := audit.OpenWith(g.AuditLog, ao)
		if err != nil {
			return nil, err
		}
		out.sink = sink
		log = slog.New(sink.Handler(log.Handler()))
	}
	fail := func(err error) (*GatewayDaemon, error) {
		out.Close()
		return nil, err
	}
	authority, err := ca.LoadOrCreate(filepath.Join(g.StateDir, "ca"))
	if err != nil {
		return fail(err)
	}
	opt := g.Options
	opt.Logger, opt.CA, opt.Audit, opt.HoneytokenDir = log, authority, out.sink, g.StateDir
	caDir := filepath.Join(g.StateDir, "ca")
	opt.CACheck = func() error { return sameCA(caDir, authority) }
	if g.WallsSpec != nil {
		w := &nftWalls{spec: g.WallsSpec, ns: g.WallsNS}
		opt.Walls = w
		opt.DNSAnswered = func(client netip.Addr, addrs []netip.Addr, ttl time.Duration) {
			if err := w.answered(addrs, ttl); err != nil {
				log.Error("transparent mode: the answer's addresses are not redirected", "client", client, "addrs", addrs, "err", err)
			}
		}
		// the walls' counters on /metrics (the default table: serve's)
		opt.Collectors = append(opt.Collectors, nft.NewCollector(g.WallsNS, nft.DefaultTable))
	}
	d, err := New(opt)
	if err != nil {
		return fail(err)
	}
	out.Daemon = d
	return out, nil
}

// sameCA reads the CA in dir back and checks it is the one egressd serves
// with: a key deleted, corrupted or replaced at runtime is found now, not
// by the next start.
func sameCA(dir string, serving *ca.CA) error {
	onDisk, err := ca.Load(dir)
	if err != nil {
		return err
	}
	if !onDisk.Certificate().Equal(serving.Certificate()) {
		return fmt.Errorf("%s holds another CA than the one egressd serves with: sandboxes trust this one, and the next start would use that one", dir)
	}
	return nil
}

// WallSpec renders the kernel walls for a policy: sandboxes (by interface
// prefix, source CIDRs or uid) may reach only the proxy and DNS ports on
// the addresses egressd listens on (and the transparent listeners, to
// which TCP 443 and 80 are redirected). extraGateways adds addresses (a
// sandbox link's gateway end) to those of the listen keys.
func WallSpec(p *policy.Policy, extraGateways ...netip.Addr) (nft.Spec, error) {
	s := nft.Spec{
		IfPrefixes:  []string{p.Sandbox.InterfacePrefix},
		SourceCIDRs: p.Sandbox.CIDRs,
		UIDs:        p.Sandbox.UIDs,
		HighRisk:    p.HighRiskPrefixes(),
		Gateways:    extraGateways,
	}
	proxyAddr, proxyPort, err := nft.ListenAddr(p.Listen.Proxy)
	if err != nil {
		return s, fmt.Errorf("listen.proxy: %w", err)
	}
	s.ProxyPort = proxyPort
	s.Gateways = appendAddr(s.Gateways, proxyAddr)
	if p.Listen.DNS != "" {
		dnsAddr, dnsPort, err := nft.ListenAddr(p.Listen.DNS)
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
		a, port, err := nft.ListenAddr(tr.hp)
		if err != nil {
			return s, fmt.Errorf("transparent listener: %w", err)
		}
		if a != proxyAddr {
			return s, fmt.Errorf("transparent listener %s must share the proxy's address %s (the redirect targets the gateway)", tr.hp, proxyAddr)
		}
		s.Redirects = append(s.Redirects, nft.Redirect{From: tr.from, To: port})
	}
	if err := toolsWall(&s, p, proxyAddr); err != nil {
		return s, err
	}
	if len(s.Redirects) > 0 {
		// Besides the DNS answers for allowed names (added as they are
		// given), the rules' cidrs are the destinations the policy could
		// allow: only those are redirected.
		for _, r := range p.Rules {
			s.RedirectCIDRs = append(s.RedirectCIDRs, r.CIDRs...)
		}
	}
	if proxyAddr.IsUnspecified() && len(extraGateways) == 0 {
		return s, errors.New("listen.proxy on an unspecified address: the walls need the concrete gateway address the sandboxes use")
	}
	return s, s.Validate()
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

// AuditOptions reads the audit signing keys a policy names (none: no
// checkpoints).
func AuditOptions(p *policy.Policy) (audit.Options, error) {
	a := p.Audit
	if a.SignKey == "" {
		return audit.Options{}, nil
	}
	key, err := audit.ReadPrivateKey(a.SignKey)
	if err != nil {
		return audit.Options{}, fmt.Errorf("audit.sign_key: %w", err)
	}
	so := &audit.SignOptions{Key: key, Records: a.CheckpointRecords, Interval: a.CheckpointInterval}
	if a.SignKeyPrevious != "" {
		if so.Previous, err = audit.ReadPrivateKey(a.SignKeyPrevious); err != nil {
			return audit.Options{}, fmt.Errorf("audit.sign_key_previous: %w", err)
		}
	}
	return audit.Options{Sign: so}, nil
}
