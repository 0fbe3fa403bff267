package daemon

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/egressd/egressd/nft"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/tools"
)

// listenTools binds tools.listen (or Options.ToolsListener) and serves
// egressd's MCP endpoint there: listening only where the config says.
// The address is one of egressd's own, so no rule reaches it through the
// proxy (proxy-loop). Its fetches go through the proxy as their callers.
func (d *Daemon) listenTools(p *policy.Policy, errc chan<- error) error {
	l := d.opt.ToolsListener
	if l == nil {
		if p.Tools.Listen == "" {
			return nil
		}
		var err error
		if l, err = net.Listen("tcp", p.Tools.Listen); err != nil {
			return fmt.Errorf("listen tools %s: %w", p.Tools.Listen, err)
		}
	}
	d.toolsAddr = l.Addr().String()
	d.px.AddListener(l.Addr())
	h := tools.Handler(tools.Config{Checkpoint: d.px, Logger: d.log.With("component", "tools"), Version: ReadBuildInfo().Version})
	// The same bounds on a client's head as the proxy's; a tool call's
	// body is bounded by the handler.
	d.tools = &http.Server{Handler: h, ReadHeaderTimeout: p.Limits.RequestHeaderTimeout, IdleTimeout: p.Limits.IdleTimeout,
		MaxHeaderBytes: p.Limits.HeaderBytes}
	go func() { errc <- d.tools.Serve(d.px.GuardListener(l)) }()
	return nil
}

// ToolsAddr is the bound address of the tool endpoint, "" when off.
func (d *Daemon) ToolsAddr() string { return d.toolsAddr }

// toolsWall opens tools.listen's port to sandboxes when the endpoint
// listens where they reach egressd (the proxy's address, or all
// addresses); on loopback it serves the host's own agents only.
func toolsWall(s *nft.Spec, p *policy.Policy, proxyAddr netip.Addr) error {
	if p.Tools.Listen == "" {
		return nil
	}
	a, port, err := nft.ListenAddr(p.Tools.Listen)
	switch {
	case err != nil:
		return fmt.Errorf("tools.listen: %w", err)
	case a.IsLoopback():
		return nil
	case a == proxyAddr || a.IsUnspecified():
		s.ExtraPorts = append(s.ExtraPorts, port)
		return nil
	}
	return fmt.Errorf("tools.listen %s: the walls let sandboxes reach the proxy's address %s only: listen there, or on loopback for the host's own agents", p.Tools.Listen, proxyAddr)
}
