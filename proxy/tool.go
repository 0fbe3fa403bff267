package proxy

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/policy"
)

// This file is the proxy's side of egressd's tool endpoint (package
// tools): a fetch a tool makes for a caller is a proxy request from that
// caller, decided, dialed, logged and counted by the same code, marked
// via: tool.

// keyVia marks a request made by egressd's tool endpoint (event.ViaTool).
const keyVia ctxKey = 100

// ServeTool serves a request the tool endpoint makes on a caller's
// behalf: r is an absolute-form request whose RemoteAddr is the caller's
// address and whose Proxy-Authorization, if any, the caller's token. It
// takes the path of every proxy request (identity, quarantine, limits,
// readiness, the decision, page types, mirror grammars, inject, the
// checked dialer, the log line and the metrics) with via: tool. A caller
// tools.identities does not allow gets 403 tool-refused.
func (x *Proxy) ServeTool(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		http.Error(w, "egressd: the fetch tool sends no CONNECT", http.StatusBadRequest)
		return
	}
	x.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyVia, event.ViaTool)))
}

// ToolGate answers a caller of the tool endpoint whom tools.identities
// does not allow (403 tool-refused, a decision line via: tool) and
// returns false; it returns true for a caller the tools serve. r is the
// caller's request to the endpoint, with the caller's token, if any, as
// Proxy-Authorization.
func (x *Proxy) ToolGate(w http.ResponseWriter, r *http.Request) bool {
	rq := &request{start: time.Now(), method: r.Method, via: event.ViaTool}
	rq.identity, rq.source = x.identify(r)
	rq.probe = x.probeLabel(r, rq.identity, "")
	if strings.HasPrefix(r.Header.Get("User-Agent"), ProbeUserAgentPrefix) {
		// An in-sandbox probe run (or `egressd selftest` beside serve)
		// asks the tools for its plan's targets: its session passes, and
		// each fetch is let through only as a live run's request to a
		// target of its plan (toolAllowed, with the fetch's host).
		return true
	}
	if ok, detail := x.toolAllowed(rq); !ok {
		x.refuse(w, r, rq, policy.ReasonToolRefused, detail)
		return false
	}
	return true
}

// toolAllowed applies tools.identities to a request made via the tool
// endpoint (every other request passes): the identity or the source
// identity it refines must be listed. Probe traffic passes: egressd's own
// self-test, and a live probe run's request to a target of its plan.
func (x *Proxy) toolAllowed(rq *request) (bool, string) {
	if rq.via != event.ViaTool || rq.probe != "" {
		return true, ""
	}
	t := &x.Policy().Tools
	for _, id := range rq.names() {
		if t.ToolAllowed(id) {
			return true, ""
		}
	}
	return false, "identity " + orNone(rq.identity) + " is not in tools.identities"
}
