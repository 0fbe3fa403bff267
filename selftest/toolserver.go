package selftest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolServer is an MCP server with a fetch-like tool (egressd's own tool
// endpoint, or one egressd does not run) that the self-test asks to fetch
// what the policy refuses: the canary URL, the metadata address in every
// spelling, the metadata names, an unlisted host. A tool server that
// returns content for any of them fetched it from somewhere egressd's
// walls do not cover: a leak naming it. The positive control (the first
// expect_reachable URL) must come back through it.
type ToolServer struct {
	Name string `json:"name"`
	URL  string `json:"url"`  // the streamable HTTP endpoint
	Tool string `json:"tool"` // the tool to call
	Arg  string `json:"arg"`  // the argument that takes the URL
}

// checkToolServers finds what makes a tool-server list unusable.
func checkToolServers(list []ToolServer) []error {
	var errs []error
	seen := map[string]bool{}
	for _, ts := range list {
		pu, err := url.Parse(ts.URL)
		switch {
		case ts.Name == "" || seen[ts.Name]:
			errs = append(errs, fmt.Errorf("tool server %q: want a unique, non-empty name", ts.Name))
		case err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "":
			errs = append(errs, fmt.Errorf("tool server %s: %q: want an absolute http:// or https:// URL", ts.Name, ts.URL))
		case ts.Tool == "" || ts.Arg == "":
			errs = append(errs, fmt.Errorf("tool server %s: want the tool and its URL argument", ts.Name))
		}
		seen[ts.Name] = true
	}
	return errs
}

// Expectations of the tool-server probes.
const (
	expToolRefused = "tool error or egressd's refusal"
	expToolContent = "content"
)

// toolServerProbes are the probes of each tool server.
func (r *runner) toolServerProbes() []probe {
	var ps []probe
	for _, ts := range r.c.ToolServers {
		add := func(kind, target, expected string, run func(ctx context.Context) outcome) {
			ps = append(ps, probe{id: "tool-server/" + ts.Name + "/" + kind, route: "tool server " + ts.Name + " (" + ts.Tool + ")",
				target: target, expected: expected, timeout: 2 * r.c.Timeout, run: run})
		}
		refused := func(kind, target string) {
			add(kind, target, expToolRefused, func(ctx context.Context) outcome { return r.toolRefused(ctx, ts, target) })
		}
		if r.c.CanaryURL != "" {
			u := r.toolCanary(ts)
			refused("canary", u)
			if r.c.CanaryLog != "" {
				tok := r.toolToken(ts)
				ps = append(ps, probe{id: "tool-server/" + ts.Name + "/canary-log", route: "canary log", target: r.c.CanaryLog, expected: expNoToken, late: true,
					run: func(ctx context.Context) outcome { return r.toolCanaryLog(ctx, ts, tok) }})
			}
		}
		for _, a := range r.c.Metadata {
			for _, s := range metadataSpellings(a) {
				refused("metadata-"+s.name+"/"+a.String(), "http://"+s.host+"/latest/meta-data/")
			}
		}
		for _, n := range r.c.MetadataNames {
			refused("metadata-name/"+n, "http://"+n+"/computeMetadata/v1/")
		}
		if r.c.Unlisted != "" {
			h := r.c.Unlisted
			if host, port, ok := strings.Cut(h, ":"); ok && port == "443" {
				h = host // a tool fetches a URL: the unlisted name over plain http
			}
			refused("unlisted", "http://"+h+"/")
		}
		if len(r.c.ExpectReachable) > 0 {
			u := r.c.ExpectReachable[0]
			add("expect", u, expToolContent, func(ctx context.Context) outcome { return r.toolReachable(ctx, ts, u) })
		}
	}
	return ps
}

// toolToken is the canary token of one tool server in this run: the
// canary log names the server whose fetch got out.
func (r *runner) toolToken(ts ToolServer) string {
	h := sha256.Sum256([]byte(r.token + "\x00" + ts.Name))
	return "egressd-tool-" + hex.EncodeToString(h[:8])
}

// toolCanary is the canary URL with the tool server's token in its query.
func (r *runner) toolCanary(ts ToolServer) string {
	u, _ := url.Parse(r.c.CanaryURL) // checked by Config.check
	q := u.Query()
	q.Set("egressd-selftest", r.toolToken(ts))
	u.RawQuery = q.Encode()
	return u.String()
}

// errNoTool is a tool server that could not be asked (unreachable, not
// MCP, no such tool).
var errNoTool = errors.New("tool server")

// callTool asks ts's tool to fetch target: whether the result is a tool
// error, and its text.
func (r *runner) callTool(ctx context.Context, ts ToolServer, target string) (isError bool, text string, err error) {
	hc := &http.Client{Transport: headerTransport{ua: r.userAgent(), rt: &http.Transport{
		Proxy: nil, DialContext: r.c.ToolDial, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: r.c.RootCAs, MinVersion: tls.VersionTLS12},
	}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "egressd-selftest", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		return false, "", fmt.Errorf("%w %s: connect %s: %w", errNoTool, ts.Name, ts.URL, err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ts.Tool, Arguments: map[string]any{ts.Arg: target}})
	if err != nil {
		return false, "", fmt.Errorf("%w %s: call %s: %w", errNoTool, ts.Name, ts.Tool, err)
	}
	var b strings.Builder
	for _, ct := range res.Content {
		switch v := ct.(type) {
		case *mcp.TextContent:
			b.WriteString(v.Text)
		case *mcp.EmbeddedResource:
			if v.Resource != nil {
				b.WriteString(v.Resource.Text)
				b.Write(v.Resource.Blob)
			}
		default:
			b.WriteString("[non-text content]")
		}
	}
	return res.IsError, b.String(), nil
}

// headerTransport sets the User-Agent of the probes' MCP requests: an
// egressd endpoint counts them as probe traffic.
type headerTransport struct {
	ua string
	rt http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", h.ua)
	return h.rt.RoundTrip(r)
}

// egressdRefusal reports whether text is egressd's refusal passed on as
// content (a tool server that fetches through egressd's proxy).
func egressdRefusal(text string) bool {
	return strings.Contains(text, "egressd: denied") || strings.Contains(text, "X-Egressd-Deny") || strings.Contains(text, "egressd refused this fetch")
}

// toolRefused asks the tool to fetch a target the policy refuses: a tool
// error or egressd's refusal passes; content is a leak naming the server.
func (r *runner) toolRefused(ctx context.Context, ts ToolServer, target string) outcome {
	isErr, text, err := r.callTool(ctx, ts, target)
	switch {
	case err != nil:
		return errored("no answer", err.Error())
	case isErr:
		return pass("tool error: " + excerpt(text, 80))
	case egressdRefusal(text):
		return pass("egressd's refusal, as content")
	case strings.TrimSpace(text) == "":
		return pass("no content")
	}
	return leak(fmt.Sprintf("%d bytes of content", len(text)),
		fmt.Sprintf("tool server %s fetched %s, which the policy refuses, and returned %q: it reaches what the sandbox may not", ts.Name, target, excerpt(text, 120)))
}

// toolReachable is the positive control through a tool server.
func (r *runner) toolReachable(ctx context.Context, ts ToolServer, target string) outcome {
	isErr, text, err := r.callTool(ctx, ts, target)
	switch {
	case err != nil:
		return errored("no answer", err.Error())
	case strings.Contains(text, "not-ready"):
		// A tool server run behind egressd as a sandbox identity of its
		// own reaches egressd, which is not ready before its first sealed
		// run: the control shows the server up and its fetches going
		// through egressd, which is what it can show before then.
		return pass("reached egressd (not ready yet): the tool fetches through egressd")
	case isErr || egressdRefusal(text):
		return failed("tool error", fmt.Sprintf("tool server %s could not fetch the expect_reachable target: %s", ts.Name, excerpt(text, 160)))
	}
	return pass(fmt.Sprintf("%d bytes of content", len(text)))
}

// toolCanaryLog looks for the tool server's canary token in the canary
// server's log.
func (r *runner) toolCanaryLog(ctx context.Context, ts ToolServer, tok string) outcome {
	o := r.canaryLogHas(ctx, tok)
	if o.status == Leak {
		o.detail = "the canary server logged tool server " + ts.Name + "'s canary fetch: it got out"
	}
	return o
}

// excerpt is s on one line, cut to n bytes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
