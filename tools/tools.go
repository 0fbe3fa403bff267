package tools

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Path is where the endpoint speaks MCP.
const Path = "/mcp"

// Checkpoint is the proxy the fetches go through (*proxy.Proxy).
type Checkpoint interface {
	// ServeTool serves an absolute-form request made for the caller at
	// r.RemoteAddr (Proxy-Authorization: the caller's token).
	ServeTool(w http.ResponseWriter, r *http.Request)
	// ToolGate answers and returns false for a caller the tools refuse.
	ToolGate(w http.ResponseWriter, r *http.Request) bool
}

// Config wires the endpoint.
type Config struct {
	Checkpoint Checkpoint // required
	Logger     *slog.Logger
	Version    string // egressd's version, in the MCP server info
	// Timeout bounds one fetch, head and body; 0: DefaultTimeout. The
	// proxy's own limits (limits.response_*) apply within it.
	Timeout time.Duration
}

// DefaultTimeout bounds a fetch: a model waits on the call, and a site
// that dribbles must not hold it for limits.response_timeout (an hour).
const DefaultTimeout = 2 * time.Minute

// Fetch tool limits.
const (
	// DefaultMaxBytes is what a fetch returns at most when the call names
	// no max_bytes: about what a model reads in one go.
	DefaultMaxBytes = 100_000
	// MaxMaxBytes caps max_bytes: HTML conversion costs about 1.2 µs a
	// byte (1 MiB: ~1.9 s of CPU, measured), so one call stays short.
	MaxMaxBytes = 1 << 20
	// maxRequestBytes bounds an MCP request body: a call carries a URL.
	maxRequestBytes = 1 << 20
)

// FetchInput is the fetch tool's arguments.
type FetchInput struct {
	URL      string `json:"url" jsonschema:"the http:// or https:// URL to fetch"`
	Method   string `json:"method,omitempty" jsonschema:"GET (the default) or HEAD"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"at most this many bytes of the response are read and returned (default 100000, at most 1048576)"`
}

const fetchDescription = "Fetch a URL through egressd, the sandbox's egress checkpoint, under the caller's own policy. " +
	"HTML comes back as Markdown, text as text. A URL the policy refuses comes back as an error that says why " +
	"(the deny reason and the operator's message): do not try to reach it another way."

// caller is who called the endpoint: what the checkpoint identifies by.
type caller struct {
	remote string // the MCP client's address
	auth   string // Proxy-Authorization for its token, "" for none
	ua     string // its User-Agent (`egressd probe`'s labels probe traffic)
}

// callerOf reads the caller of an MCP request. A token comes as
// Authorization: Basic base64(user:secret), or Bearer user:secret, and is
// handed to the checkpoint as the Proxy-Authorization it understands.
func callerOf(r *http.Request) caller {
	c := caller{remote: r.RemoteAddr, ua: r.Header.Get("User-Agent")}
	h := r.Header.Get("Authorization")
	switch {
	case strings.HasPrefix(h, "Basic "):
		c.auth = h
	case strings.HasPrefix(h, "Bearer "):
		if tok := strings.TrimPrefix(h, "Bearer "); strings.Contains(tok, ":") {
			c.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(tok))
		}
	}
	return c
}

// Handler serves the endpoint: MCP at Path, 404 elsewhere. Every MCP
// request is first put to the checkpoint's tool gate (tools.identities);
// the server is stateless, so the identity is decided per HTTP request,
// never carried over from another connection's session.
func Handler(cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	schemas := mcp.NewSchemaCache()
	impl := &mcp.Implementation{Name: "egressd", Title: "egressd fetch", Version: cfg.Version}
	mh := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		c := callerOf(r)
		s := mcp.NewServer(impl, &mcp.ServerOptions{Logger: log, SchemaCache: schemas,
			Instructions: "fetch reaches the web under this sandbox's egress policy; refusals say why."})
		f := &fetcher{cp: cfg.Checkpoint, who: c, timeout: cmp.Or(cfg.Timeout, DefaultTimeout)}
		mcp.AddTool(s, &mcp.Tool{Name: "fetch", Title: "Fetch a URL (egressd)", Description: fetchDescription,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}}, f.call)
		return s
	}, &mcp.StreamableHTTPOptions{Stateless: true, Logger: log, MaxRequestBodyBytes: maxRequestBytes})
	mux := http.NewServeMux()
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		gr := r.Clone(r.Context())
		gr.Header = http.Header{"User-Agent": r.Header.Values("User-Agent")}
		if c := callerOf(r); c.auth != "" {
			gr.Header.Set("Proxy-Authorization", c.auth)
		}
		if !cfg.Checkpoint.ToolGate(w, gr) {
			return
		}
		mh.ServeHTTP(w, r)
	})
	return mux
}

func ptr[T any](v T) *T { return &v }

// fetcher runs the fetch tool for one caller.
type fetcher struct {
	cp      Checkpoint
	who     caller
	timeout time.Duration
}

// call is the fetch tool: a refusal or a failure is a tool error (the
// model reads it), never a protocol error.
func (f *fetcher) call(ctx context.Context, _ *mcp.CallToolRequest, in FetchInput) (*mcp.CallToolResult, any, error) {
	text, err := f.fetch(ctx, in)
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
}

// errRefused marks egressd's own refusal of a fetch.
var errRefused = errors.New("egressd refused this fetch")

// fetch sends the request through the checkpoint as the caller and
// renders what came back.
func (f *fetcher) fetch(ctx context.Context, in FetchInput) (string, error) {
	method := strings.ToUpper(in.Method)
	switch method {
	case "":
		method = http.MethodGet
	case http.MethodGet, http.MethodHead:
	default:
		return "", fmt.Errorf("method %q: the fetch tool sends GET or HEAD", in.Method)
	}
	limit := in.MaxBytes
	switch {
	case limit == 0:
		limit = DefaultMaxBytes
	case limit < 0 || limit > MaxMaxBytes:
		return "", fmt.Errorf("max_bytes %d: want 1 to %d", in.MaxBytes, MaxMaxBytes)
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("url %q: want an absolute http:// or https:// URL without user info", in.URL)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", in.URL, err)
	}
	req.RequestURI = u.String() // absolute form, as a proxy client sends it
	req.RemoteAddr = f.who.remote
	req.Header.Set("User-Agent", "egressd-fetch")
	if f.who.ua != "" {
		req.Header.Set("User-Agent", f.who.ua)
	}
	req.Header.Set("Accept", "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.5")
	req.Header.Set("Accept-Encoding", "identity")
	if f.who.auth != "" {
		req.Header.Set("Proxy-Authorization", f.who.auth)
	}
	w := newCapture(limit)
	f.cp.ServeTool(w, req)
	text, err := result(u.String(), method, w)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// the proxy cut the response when the context ended
		return "", fmt.Errorf("%s %s: no complete answer within %v; what came:\n%s", method, u, f.timeout, cmp.Or(text, "(nothing)"))
	}
	return text, err
}

// result turns a captured response into the tool's text, or its error.
func result(target, method string, w *capture) (string, error) {
	body := w.buf.Bytes()
	if deny := w.header.Get("X-Egressd-Deny"); deny != "" {
		return "", fmt.Errorf("%w (%s): %s %s\n%s", errRefused, deny, method, target, strings.TrimSpace(string(body)))
	}
	ct := w.header.Get("Content-Type")
	if method == http.MethodHead {
		return fmt.Sprintf("%s %s: HTTP %d\nContent-Type: %s\nContent-Length: %s\n", method, target, w.code(), ct, w.header.Get("Content-Length")), nil
	}
	text := render(ct, body, target, w.limit)
	if w.truncated {
		text += fmt.Sprintf("\n\n[egressd: truncated at max_bytes=%d]", w.limit)
	}
	if w.code() >= 400 {
		return "", fmt.Errorf("%s %s: HTTP %d from the site:\n%s", method, target, w.code(), text)
	}
	return text, nil
}
