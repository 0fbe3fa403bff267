package policy

import (
	"fmt"
	"net/http"

	"github.com/egressd/egressd/policy/classify"
)

// Header budgets. A header is a channel like a body: a read rule forwards
// at most Limits.ReadHeadBytes of them, and a mirror rule forwards only the
// headers its ecosystem's clients send, each within a cap.
const (
	// mirrorHeaderValueCap bounds one forwarded header value on a mirror
	// rule (User-Agent strings of package clients stay under 200 bytes).
	mirrorHeaderValueCap = 512
	// mirrorAuthCap bounds Authorization: registry bearer tokens (JWTs,
	// cloud registry tokens) reach a few KiB.
	mirrorAuthCap = 8 << 10
	// mirrorHeadCap bounds all forwarded headers of a mirror request.
	mirrorHeadCap = 12 << 10
)

// notForwarded are headers the proxy itself removes before forwarding
// (goproxy's RemoveProxyHeaders): they are not counted.
var notForwarded = map[string]bool{"Proxy-Connection": true, "Proxy-Authenticate": true, "Proxy-Authorization": true}

// CheckHead checks the request headers of a request DecideRequest allowed.
// On a mirror rule, drop lists the headers the ecosystem's clients never
// send: the proxy removes them before forwarding. ok is false when what
// would be forwarded is over budget; detail says why (reason
// ReasonHeaderBudget).
func (p *Policy) CheckHead(d *Decision, h http.Header) (drop []string, ok bool, detail string) {
	r := d.Rule
	if r == nil {
		return nil, false, "no rule"
	}
	total := 0
	switch {
	case r.Mirror != MirrorNone:
		for name, vs := range h {
			if notForwarded[name] {
				continue
			}
			if !classify.MirrorHeaderAllowed(r.Mirror, name) {
				drop = append(drop, name)
				continue
			}
			limit := mirrorHeaderValueCap
			if name == "Authorization" {
				limit = mirrorAuthCap
			}
			for _, v := range vs {
				if len(v) > limit {
					return drop, false, fmt.Sprintf("%s of %d bytes over the %d-byte cap of a %s mirror", name, len(v), limit, r.Mirror)
				}
				total += len(name) + len(v) + 4
			}
		}
		if total > mirrorHeadCap {
			return drop, false, fmt.Sprintf("headers of %d bytes over the %d-byte cap of a mirror request", total, mirrorHeadCap)
		}
	case !r.AllPages:
		for name, vs := range h {
			if notForwarded[name] {
				continue
			}
			for _, v := range vs {
				total += len(name) + len(v) + 4
			}
		}
		if total > p.Limits.ReadHeadBytes {
			return nil, false, fmt.Sprintf("headers of %d bytes over limits.read_head_bytes %d", total, p.Limits.ReadHeadBytes)
		}
	}
	return drop, true, ""
}
