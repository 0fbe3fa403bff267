package proxy

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
)

// honeyHit is a honeytoken found in a request, and where.
type honeyHit struct {
	token honeytoken.Token
	where string
}

// honeyAttrs are the decision line's honeytoken keys (none without a hit).
func (rq *request) honeyAttrs() []slog.Attr {
	h := rq.honey
	if h == nil {
		return nil
	}
	return []slog.Attr{
		slog.String(event.KeyHoneytoken, string(h.token.Kind)),
		slog.String(event.KeyHoneytokenOf, h.token.Identity),
		slog.String(event.KeyHoneytokenWhere, h.where),
	}
}

// honeyInRequest looks for a honeytoken in what the proxy sees of a
// request before its body: the path, the query, the Host and every header
// (Basic credentials decoded).
func (x *Proxy) honeyInRequest(r *http.Request, rq *request) *honeyHit {
	reg := x.honey
	if reg.Empty() {
		return nil
	}
	for _, part := range []struct{ where, s string }{{"host", rq.target.Host()}, {"path", rq.target.Path}, {"query", rq.target.Query}, {"host header", r.Host}} {
		if t, ok := reg.ScanString(part.s); ok {
			return &honeyHit{t, part.where}
		}
	}
	for name, vs := range r.Header {
		for _, v := range vs {
			if t, ok := reg.ScanHeader(name, v); ok {
				return &honeyHit{t, "header " + name}
			}
		}
	}
	return nil
}

// honeyInName looks for a honeytoken in a target name (CONNECT
// authority, transparent SNI); where says which.
func (x *Proxy) honeyInName(rq *request, where string) *honeyHit {
	if t, ok := x.honey.ScanString(rq.target.Host()); ok {
		return &honeyHit{t, where}
	}
	return nil
}

// honeyInBody looks for a honeytoken in a request body as the mirror and
// read-only POST grammars decoded it.
func (x *Proxy) honeyInBody(body []byte) *honeyHit {
	if t, ok := x.honey.Scan(body); ok {
		return &honeyHit{t, "body"}
	}
	return nil
}

// honeyDetail is the refusal's detail: what kind of canary, and where.
func honeyDetail(h *honeyHit) string {
	return fmt.Sprintf("a canary credential egressd placed in a sandbox (%s) in the %s: refused whatever the rule says, reported as an exfiltration attempt", h.token.Kind, h.where)
}

// denyHoneytoken refuses a request that carries a honeytoken.
func (x *Proxy) denyHoneytoken(r *http.Request, rq *request, h *honeyHit) *http.Response {
	rq.honey = h
	return x.deny(r, rq, policy.ReasonHoneytoken, rq.d.RuleName(), honeyDetail(h))
}
