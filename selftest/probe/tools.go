package probe

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/egressd/egressd/selftest"
)

// ParseToolServer reads a --tool-server value, NAME=URL with optional
// ,tool=TOOL and ,arg=ARG (defaults fetch and url): a tool server this
// sandbox is given, whose fetch the probe asks for what the policy refuses.
func ParseToolServer(s string) (selftest.ToolServer, error) {
	ts := selftest.ToolServer{Tool: "fetch", Arg: "url"}
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.ContainsAny(name, "/ ,") {
		return ts, fmt.Errorf("--tool-server %q: want NAME=URL[,tool=TOOL][,arg=ARG]", s)
	}
	ts.Name = name
	parts := strings.Split(rest, ",")
	ts.URL = parts[0]
	if u, err := url.Parse(ts.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ts, fmt.Errorf("--tool-server %s: %q: want the http:// or https:// URL of its MCP endpoint", name, ts.URL)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch {
		case v == "":
			return ts, fmt.Errorf("--tool-server %s: %q: want tool=TOOL or arg=ARG", name, p)
		case k == "tool":
			ts.Tool = v
		case k == "arg":
			ts.Arg = v
		default:
			return ts, fmt.Errorf("--tool-server %s: unknown option %q (tool, arg)", name, k)
		}
	}
	return ts, nil
}
