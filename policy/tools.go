package policy

import (
	"fmt"
	"net"
	"regexp"
	"slices"
)

// This file holds the config of the tool endpoint (tools:) and of the
// probes of tool servers egressd does not run (selftest.tool_servers).

// Tools is egressd's own MCP tool endpoint (package tools).
type Tools struct {
	// Listen is host:port of the endpoint (MCP at /mcp); empty: off.
	Listen string
	// Identities, when set, are the only declared identities whose
	// callers may use the tools; others are refused (tool-refused).
	// Empty: every caller, under its own identity's policy.
	Identities []string
}

// ToolAllowed reports whether a caller of identity may use the tool
// endpoint.
func (t *Tools) ToolAllowed(identity string) bool {
	return len(t.Identities) == 0 || slices.Contains(t.Identities, identity)
}

// ToolServer is an MCP server egressd does not run whose fetch-like tool
// the self-test calls with targets the policy refuses.
type ToolServer struct {
	Name string // names it in the self-test's report and verdict
	URL  string // its streamable HTTP endpoint
	Tool string // the tool to call; default "fetch"
	Arg  string // the argument that takes the URL; default "url"
}

type rawTools struct {
	Listen     at[string]   `yaml:"listen"`
	Identities []at[string] `yaml:"identities"`
}

type rawToolServer struct {
	Name at[string] `yaml:"name"`
	URL  at[string] `yaml:"url"`
	Tool at[string] `yaml:"tool"`
	Arg  at[string] `yaml:"arg"`
}

const (
	defaultToolName = "fetch"
	defaultToolArg  = "url"
)

// toolServerName is what a tool server's name may be: it is part of
// probe ids and metric labels.
var toolServerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (c *compiler) tools(p *Policy, t *rawTools) {
	p.Tools.Listen = c.hostPort(t.Listen, "tools.listen", "")
	if p.Tools.Listen != "" {
		if _, port, err := net.SplitHostPort(p.Tools.Listen); err == nil && port == p.listenPort() {
			c.errf(t.Listen.Line, "tools.listen", "%q: the proxy listens on that port", t.Listen.V)
		}
	}
	for j, v := range t.Identities {
		f := fmt.Sprintf("tools.identities[%d]", j)
		if !slices.ContainsFunc(p.Identities, func(id Identity) bool { return id.Name == v.V }) {
			c.errf(v.Line, f, "%q: not a declared identity (identities[].name)", v.V)
			continue
		}
		p.Tools.Identities = append(p.Tools.Identities, v.V)
	}
	if len(t.Identities) > 0 && t.Listen.V == "" {
		c.errf(t.Identities[0].Line, "tools.identities", "set without tools.listen: there is no tool endpoint to refuse")
	}
}

// listenPort is the proxy's port, "" when it cannot be read.
func (p *Policy) listenPort() string {
	_, port, err := net.SplitHostPort(p.Listen.Proxy)
	if err != nil || port == "0" {
		return ""
	}
	return port
}

func (c *compiler) toolServers(st *Selftest, raw []rawToolServer) {
	seen := map[string]bool{}
	for j, r := range raw {
		f := fmt.Sprintf("selftest.tool_servers[%d]", j)
		ts := ToolServer{Name: r.Name.V, Tool: defaultToolName, Arg: defaultToolArg}
		switch {
		case !toolServerName.MatchString(ts.Name):
			c.errf(r.Name.Line, f+".name", "%q: want a short name (letters, digits, . _ -)", ts.Name)
			continue
		case seen[ts.Name]:
			c.errf(r.Name.Line, f+".name", "duplicate tool server %q", ts.Name)
			continue
		}
		seen[ts.Name] = true
		if r.URL.V == "" {
			c.errf(r.Name.Line, f+".url", "tool server %q needs the url of its MCP endpoint", ts.Name)
			continue
		}
		if ts.URL = c.url(r.URL, f+".url"); ts.URL == "" {
			continue
		}
		if r.Tool.V != "" {
			ts.Tool = r.Tool.V
		}
		if r.Arg.V != "" {
			ts.Arg = r.Arg.V
		}
		st.ToolServers = append(st.ToolServers, ts)
	}
}
