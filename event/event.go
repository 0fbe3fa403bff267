// Package event defines the decision event: the one log record the proxy
// writes per decision (message "decision"), its keys and their meaning.
// The proxy's log writer, the audit chain and the report's log parser all
// use it, so a key is named once. To add a key: a constant here, a field
// in Record with the same JSON name (TestRecordKeys checks), and the
// proxy's writer.
package event

import "time"

// Msg is the log message of a decision record.
const Msg = "decision"

// DNSMsg is the message of the DNS filter's line per query; a query
// refused for a honeytoken carries the optional honeytoken keys too.
const DNSMsg = "dns query"

// The keys of a decision record, in the order the proxy writes them.
const (
	KeyIdentity  = "identity"  // who asked: the sandbox's identity or source address
	KeySource    = "source"    // the source identity a proven token refined ("" when none)
	KeyView      = "view"      // the declared identity whose rules applied, "" for none
	KeyMethod    = "method"    // HTTP method, CONNECT, or TLS (transparent)
	KeyHost      = "host"      // the target host
	KeyPort      = "port"      // the target port
	KeyPath      = "path"      // the request path, truncated
	KeyQueryLen  = "query_len" // bytes of the query string
	KeyPageType  = "page_type" // the page type the policy saw
	KeyRule      = "rule"      // the matching rule's name, "" when none
	KeyDecision  = "decision"  // Allow or Deny
	KeyReason    = "reason"    // a policy.Reason name
	KeyHighRisk  = "high_risk" // the target is on the high-risk list
	KeyStatus    = "status"    // the HTTP status the client got (0: tunnel closed)
	KeyBytesIn   = "bytes_in"  // bytes from the upstream
	KeyBytesOut  = "bytes_out" // bytes to the upstream
	KeyBytes     = "bytes"     // bytes_in + bytes_out
	KeyDetail    = "detail"    // what fired, in words
	KeyInspected = "inspected" // the request was read inside an inspected tunnel
	KeyVia       = "via"       // how the request came: "" through the proxy, ViaTool from egressd's tool endpoint
)

// Keys lists every key of a full decision record, in order.
func Keys() []string {
	return []string{KeyIdentity, KeySource, KeyView, KeyMethod, KeyHost, KeyPort, KeyPath, KeyQueryLen, KeyPageType, KeyRule, KeyDecision,
		KeyReason, KeyHighRisk, KeyStatus, KeyBytesIn, KeyBytesOut, KeyBytes, KeyDetail, KeyInspected, KeyVia}
}

// Optional keys: written only on the decisions they apply to.
const (
	KeyHoneytoken      = "honeytoken"       // the kind of canary credential the request carried (reason honeytoken)
	KeyHoneytokenOf    = "honeytoken_of"    // the identity egressd issued that honeytoken to
	KeyHoneytokenWhere = "honeytoken_where" // where it appeared: path, query, header NAME, body, sni, websocket …
)

// OptionalKeys lists the keys a decision record carries only when they
// apply, in order, after Keys.
func OptionalKeys() []string { return []string{KeyHoneytoken, KeyHoneytokenOf, KeyHoneytokenWhere} }

// ViaTool is KeyVia's value for a request egressd's fetch tool (package
// tools) made on a caller's behalf.
const ViaTool = "tool"

// Tunnel records: every tunnel (CONNECT, transparent TLS, WebSocket) has
// an open record when it is established and a close record when it ends,
// both with message Msg and the same KeyTunnelID, so the audit chain can
// tell a tunnel whose end was never recorded. They are not decisions (the
// decision is its own record): IsDecision is false for them.
const (
	KeyTunnel   = "tunnel"    // TunnelOpen or TunnelClose
	KeyTunnelID = "tunnel_id" // the tunnel's number, unique in one run of egressd
	TunnelOpen  = "open"
	TunnelClose = "close"
)

// TunnelKeys lists the keys only tunnel records carry (besides some of
// Keys: identity, method, host, port, rule).
func TunnelKeys() []string { return []string{KeyTunnel, KeyTunnelID} }

// Values of KeyDecision.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Record is a decision record as read back from a JSON log line. The
// time, level and msg keys are slog's.
type Record struct {
	Time      time.Time `json:"time"`
	Level     string    `json:"level"`
	Msg       string    `json:"msg"`
	Identity  string    `json:"identity"`
	Source    string    `json:"source"`
	View      string    `json:"view"`
	Method    string    `json:"method"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Path      string    `json:"path"`
	QueryLen  int       `json:"query_len"`
	PageType  string    `json:"page_type"`
	Rule      string    `json:"rule"`
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason"`
	HighRisk  bool      `json:"high_risk"`
	Status    int       `json:"status"`
	BytesIn   int64     `json:"bytes_in"`
	BytesOut  int64     `json:"bytes_out"`
	Bytes     int64     `json:"bytes"`
	Detail    string    `json:"detail"`
	Inspected bool      `json:"inspected"`
	Via       string    `json:"via"`

	Honeytoken      string `json:"honeytoken,omitempty"`
	HoneytokenOf    string `json:"honeytoken_of,omitempty"`
	HoneytokenWhere string `json:"honeytoken_where,omitempty"`

	Tunnel   string `json:"tunnel,omitempty"`    // tunnel records only
	TunnelID uint64 `json:"tunnel_id,omitempty"` // tunnel records only
}

// IsDecision reports whether r is a decision record (not another log line).
func (r *Record) IsDecision() bool { return r.Msg == Msg && r.Tunnel == "" }
