package proxy

import (
	"net/http"

	"github.com/egressd/egressd/policy"
)

// injectCredential strips, on a request egressd forwards, the client's own
// values of the headers inject rules set for its host, and adds the rule's
// credential. The credential goes only where the rule names the host
// exactly (compile-time), only on a TLS upstream leg unless the rule says
// plain_http, and never along a redirect: egressd does not follow
// redirects, and the client's next request is decided afresh for its own
// host. Errors name the secret file, never its content.
func (x *Proxy) injectCredential(r *http.Request, rq *request, p *policy.Policy) *http.Response {
	in := rq.d.InjectFor()
	strip := p.InjectHeaders(rq.d.Host)
	if in == nil && len(strip) == 0 {
		return nil
	}
	if in != nil && !in.PlainHTTP && rq.tunnel == nil && rq.target.Scheme != "https" {
		for _, h := range strip {
			r.Header.Del(h)
		}
		return x.deny(r, rq, policy.ReasonInjectCleartext, rq.d.RuleName(),
			"rule "+rq.d.RuleName()+" adds a credential, which egressd sends only over TLS: use https:// (or set inject.plain_http for a trusted network)")
	}
	if err := x.secret.Apply(r.Header, strip, in); err != nil {
		return x.deny(r, rq, policy.ReasonInjectUnavailable, rq.d.RuleName(), err.Error())
	}
	return nil
}
