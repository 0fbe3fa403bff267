package policy

// Reason is why a decision came out as it did: the X-Egressd-Deny value,
// the log's reason field and the reason label of egressd_requests_total.
// Every reason egressd sends or logs is declared below, once, with its
// status and the advice a refused client gets; the policy and the proxy
// both use these values, and README's "Deny reasons" table must list
// exactly the denials (TestReadmeDenyReasons).
//
// To add a reason: one line in the var block below, and a row in README's
// table.
type Reason uint8

// reasonInfo is what a Reason stands for.
type reasonInfo struct {
	name   string
	status int    // the HTTP status of the refusal; 0: logged only (a tunnel closed after 200), 200: not a denial
	help   string // one line of advice for a refused client
}

// reasons is indexed by Reason; ReasonAllowed, the zero value, is first.
var reasons = []reasonInfo{{name: "allowed", status: 200}}

// newReason registers a reason; only the var block below calls it.
func newReason(name string, status int, help string) Reason {
	reasons = append(reasons, reasonInfo{name, status, help})
	return Reason(len(reasons) - 1)
}

// ReasonAllowed is the reason of every allowed decision.
const ReasonAllowed Reason = 0

// The reasons, one line each: name (on the wire), status, advice.
var (
	// Policy decisions.
	ReasonNoRule         = newReason("no-rule", 403, "host not in allowlist: add it to allow[] or ask the operator")
	ReasonPort           = newReason("port", 403, "port not allowed for this host: add it to the rule's ports or ask the operator")
	ReasonHighRisk       = newReason("high-risk", 403, "high-risk destination (cloud metadata, console or registry upload host): never allowed")
	ReasonSpecialAddr    = newReason("special-address", 403, "private, loopback or other special-use address: allowed only by a rule whose cidrs name that block")
	ReasonBadTarget      = newReason("bad-target", 403, "malformed or ambiguous target: use a plain host name or address")
	ReasonMethod         = newReason("method", 403, "method not allowed by the rule: add it to the rule's methods or ask the operator")
	ReasonPath           = newReason("path", 403, "path not allowed by the rule: add it to the rule's paths or ask the operator")
	ReasonPageType       = newReason("page-type", 403, "page type not allowed by the rule: add it to the rule's pages or ask the operator")
	ReasonMirror         = newReason("mirror", 403, "mirror rules are download-only: publishing, uploads and logins are refused")
	ReasonHeaderBudget   = newReason("header-budget", 403, "request headers over the rule's budget: send fewer or shorter headers, or ask the operator (limits.read_head_bytes)")
	ReasonQueryBudget    = newReason("query-budget", 403, "query string over the rule's budget: shorten it, or ask the operator (limits.query_bytes)")
	ReasonBody           = newReason("body", 403, "request body is not what this read-only POST sends: see the rule's read_posts")
	ReasonWildcardBudget = newReason("wildcard-budget", 403, "this identity spent its budget of new names under the rule's wildcard (limits.dns_wildcard_names): use names the rule lists, or ask the operator")
	ReasonExactOnly      = newReason("exact-only", 403, "limits.dns_exact_only: only names a rule lists exactly are resolved")
	ReasonHoneytoken     = newReason("honeytoken", 403, "the request carries a canary credential egressd placed in the sandbox: refused whatever the rule says and reported as an exfiltration attempt")

	// The proxy's own checks.
	ReasonProxyLoop             = newReason("proxy-loop", 403, "the target is egressd itself")
	ReasonQuarantine            = newReason("quarantine", 403, "this client's identity is quarantined: ask the operator")
	ReasonInspectionUnavailable = newReason("inspection-unavailable", 403, "the rule needs TLS inspection and egressd has no CA (or could not issue a certificate): ask the operator")
	ReasonInjectCleartext       = newReason("inject-cleartext", 403, "this rule adds a credential, which egressd sends only over TLS: use https://")
	ReasonInjectUnavailable     = newReason("inject-unavailable", 502, "the credential this rule adds is unavailable: ask the operator")
	ReasonInternal              = newReason("internal", 403, "egressd reached a state it should not: report it to the operator")
	ReasonBadRequest            = newReason("bad-request", 400, "malformed or ambiguous request (a request smuggling signal): send one plain request")
	ReasonHostMismatch          = newReason("host-mismatch", 400, "the Host header, inner request or SNI disagrees with the target: send one target")
	ReasonNotProxyRequest       = newReason("not-proxy-request", 400, "this is a forward proxy: send absolute-form requests (http://host/path) or CONNECT")
	ReasonConnLimit             = newReason("conn-limit", 429, "too many concurrent connections for this identity: close some and retry")
	ReasonNotReady              = newReason("not-ready", 503, "egressd is not ready: the self-test has not passed yet (see /readyz)")
	ReasonAuditUnavailable      = newReason("audit-unavailable", 503, "egressd cannot write its audit log and lets nothing through that it cannot record: ask the operator")
	ReasonFDLimit               = newReason("fd-limit", 503, "egressd is out of file descriptors: new connections are shed; retry later")
	ReasonUpstreamUnreachable   = newReason("upstream-unreachable", 502, "the upstream could not be reached")
	ReasonUpstreamTimeout       = newReason("upstream-timeout", 504, "the upstream did not answer in time")
	ReasonUpgrade               = newReason("upgrade", 403, "a protocol switch would carry data no rule checks: only WebSocket, on an inspected rule with upgrade: [websocket]; h2c never")
	ReasonHeaderTooLarge        = newReason("header-too-large", 431, "request head over limits.header_bytes: send fewer or shorter headers")
	ReasonURLTooLong            = newReason("url-too-long", 414, "request target over 8192 bytes: shorten it")
	ReasonToolRefused           = newReason("tool-refused", 403, "this sandbox is not allowed egressd's tools (tools.identities): ask the operator")

	// Tunnels closed after "200 Connection established": logged only.
	ReasonSNIMismatch   = newReason("sni-mismatch", 0, "the TLS SNI names another host than the tunnel")
	ReasonNotTLS        = newReason("not-tls", 0, "the rule expects TLS; declare tls: false for raw TCP")
	ReasonNoClientHello = newReason("no-client-hello", 0, "no TLS ClientHello arrived in time")
	ReasonNoSNI         = newReason("no-sni", 0, "transparent TLS needs SNI to name the host")
	ReasonTLSHandshake  = newReason("tls-handshake", 0, "the TLS handshake with the client failed")
	ReasonECH           = newReason("ech", 0, "the ClientHello carries encrypted_client_hello: a host-only tunnel cannot see the real host")
	ReasonReload        = newReason("reload", 0, "a reload changed the tunnel's rule between spliced and inspected: reconnect")
	ReasonShutdown      = newReason("shutdown", 0, "egressd was shutting down (its drain had closed every tunnel): reconnect")

	// Allowed tunnels, logged when they close: not denials.
	ReasonTunnel            = newReason("tunnel", 200, "")
	ReasonTransparentTunnel = newReason("transparent tunnel", 200, "")
)

// String is the reason's name on the wire and in the log.
func (r Reason) String() string {
	if int(r) < len(reasons) {
		return reasons[r].name
	}
	return "unknown"
}

// Help returns the advice for a denial reason ("" for an allow).
func (r Reason) Help() string {
	if int(r) < len(reasons) {
		return reasons[r].help
	}
	return ""
}

// Status is the HTTP status a client refused for r gets: 0 for a tunnel
// closed after it was established (logged only), 200 for an allow.
func (r Reason) Status() int {
	if int(r) < len(reasons) {
		return reasons[r].status
	}
	return 403
}

// Denies reports whether r is a denial (every reason but an allow).
func (r Reason) Denies() bool { return r.Status() != 200 }

// Reasons returns every reason, in declaration order.
func Reasons() []Reason {
	rs := make([]Reason, len(reasons))
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}
