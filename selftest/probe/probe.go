// Package probe is the sandbox side of the self-test: `egressd probe` (and
// `egressd run` before its command) fetches the plan from egressd through
// the checkpoint, runs the catalog from inside the sandbox with the
// sandbox's own, unprivileged sockets, and reports the result back the
// same way. The sandbox needs no config: only the proxy's address, which
// it has anyway.
package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/egressd/egressd/selftest"
)

// Host is the reserved name egressd's proxy answers itself (proxy.ProbeHost;
// repeated here so the sandbox side does not link the proxy).
const Host = "egressd.probe.invalid"

// userAgentPrefix marks a probe run's requests (proxy.ProbeUserAgentPrefix).
const userAgentPrefix = "egressd-probe/"

const maxPlan = 1 << 20

// Plan is what egressd hands a sandbox: who it thinks the sandbox is, the
// run token, and the targets.
type Plan struct {
	Identity string           `json:"identity"`
	Token    string           `json:"token"`
	Targets  selftest.Targets `json:"targets"`
}

// UserAgent marks the run's requests as probe traffic.
func (p *Plan) UserAgent() string { return userAgentPrefix + p.Token }

// Options are the sandbox's view of egressd.
type Options struct {
	Proxy netip.AddrPort // egressd's proxy as the sandbox reaches it
	DNS   netip.AddrPort // the sandbox's resolver; zero: skip the resolver probe
	// Dial opens the sandbox's own sockets; nil: a net.Dialer.
	Dial selftest.DialFunc
	// ListenICMP opens an ICMP socket; nil: net.ListenPacket.
	ListenICMP func(network string) (net.PacketConn, error)
	Timeout    time.Duration // per API call; zero: 10s
	// Env and Home are scanned for long-lived credentials (names and
	// locations into the report, never values); Env nil: no scan.
	Env  []string
	Home string
	// ToolServers are the MCP tool servers this sandbox is given
	// (--tool-server): each must refuse what the policy refuses.
	ToolServers []selftest.ToolServer
}

func (o *Options) dial() selftest.DialFunc {
	if o.Dial != nil {
		return o.Dial
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	return d.DialContext
}

// client talks to egressd's probe API through the proxy.
func (o *Options) client() *http.Client {
	proxyURL := &url.URL{Scheme: "http", Host: o.Proxy.String()}
	dial := o.dial()
	return &http.Client{
		Timeout: cmpDur(o.Timeout, 10*time.Second),
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(proxyURL),
			DialContext:       dial,
			DisableKeepAlives: true,
		},
	}
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// FetchPlan gets the plan from egressd through the proxy.
func FetchPlan(ctx context.Context, o Options) (*Plan, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+Host+"/v1/plan", nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the probe plan from egressd at %s: %w", o.Proxy, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPlan))
	if err != nil {
		return nil, fmt.Errorf("fetch the probe plan: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the probe plan from egressd at %s: %s: %s", o.Proxy, resp.Status, strings.TrimSpace(string(b)))
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("probe plan from %s: %w", o.Proxy, err)
	}
	if p.Token == "" {
		return nil, errors.New("probe plan without a run token")
	}
	return &p, nil
}

// Run runs the plan's catalog from this sandbox. ICMP needs a raw socket:
// where this user cannot open one, an agent with the same rights cannot
// send ICMP either, and the report says so rather than failing.
func Run(ctx context.Context, p *Plan, o Options) (*selftest.Report, error) {
	c := p.Targets.Config()
	c.Dial = o.dial()
	c.Proxy, c.DNS = o.Proxy, o.DNS
	c.ToolServers, c.ToolDial = o.ToolServers, o.dial()
	c.UserAgent = p.UserAgent()
	c.HostSockets = selftest.HostSocketPaths() // here, the probes see the sandbox's files
	c.Vsock = true                             // and run as the sandbox does
	listen := o.ListenICMP
	if listen == nil {
		listen = func(network string) (net.PacketConn, error) { return net.ListenPacket(network, "") }
	}
	c.ListenICMP = listen
	var notes []selftest.Result
	if len(c.ICMP) > 0 {
		if pc, err := listen("ip4:icmp"); err != nil && errors.Is(err, syscall.EPERM) {
			notes = append(notes, selftest.Result{ID: "icmp", Route: "direct icmp", Target: fmt.Sprint(c.ICMP), Expected: "no reply",
				Status: selftest.Pass, Result: "no ICMP socket for this user",
				Detail: fmt.Sprintf("uid %d cannot open a raw ICMP socket here, so neither can an agent with its rights; run the probe with the agent's privileges", os.Geteuid())})
			c.ICMP = nil
		} else if err == nil {
			pc.Close()
		}
	}
	rep, err := selftest.Run(ctx, c)
	if err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, notes...)
	if o.Env != nil {
		rep.Credentials = ScanCredentials(o.Env, o.Home)
	}
	return rep, nil
}

// Report posts the result to egressd, which attributes it to the identity
// of this sandbox's source address. every is the probe's schedule (0 for
// a single run), from which egressd tells an overdue probe.
func Report(ctx context.Context, p *Plan, rep *selftest.Report, every time.Duration, o Options) error {
	body, err := json.Marshal(map[string]any{"token": p.Token, "every_ns": every, "report": rep})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+Host+"/v1/result", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.client().Do(req)
	if err != nil {
		return fmt.Errorf("report the probe result to egressd: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("report the probe result to egressd: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// ProxyFromEnv is the proxy address from HTTPS_PROXY, HTTP_PROXY (either
// case) or ALL_PROXY, resolved to an address.
func ProxyFromEnv(ctx context.Context) (netip.AddrPort, error) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		if v := os.Getenv(k); v != "" {
			return ParseProxy(ctx, v)
		}
	}
	return netip.AddrPort{}, errors.New("no proxy: pass --proxy HOST:PORT or set HTTPS_PROXY")
}

// ParseProxy accepts http://host:port or host:port.
func ParseProxy(ctx context.Context, s string) (netip.AddrPort, error) {
	hp := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("proxy %q: %w", s, err)
		}
		hp = u.Host
		if u.Port() == "" {
			hp = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	h, port, err := net.SplitHostPort(hp)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("proxy %q: want host:port: %w", s, err)
	}
	addr, err := netip.ParseAddr(h)
	if err != nil {
		addrs, rerr := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		if rerr != nil || len(addrs) == 0 {
			return netip.AddrPort{}, fmt.Errorf("proxy %q: resolve %s: %v", s, h, rerr)
		}
		addr = addrs[0]
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(addr.Unmap().String(), port))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("proxy %q: %w", s, err)
	}
	return ap, nil
}

// ResolverFromFile is the first nameserver of a resolv.conf, on port 53.
func ResolverFromFile(path string) (netip.AddrPort, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(a.Unmap(), 53), nil
			}
		}
	}
	return netip.AddrPort{}, fmt.Errorf("%s: no nameserver", path)
}
