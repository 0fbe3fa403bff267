// Package tools is egressd's own Model Context Protocol endpoint: a
// `fetch` tool (streamable HTTP transport, official Go SDK) whose every
// call is a proxy request from its caller. The MCP client's source
// address, or the token it sends, is the identity; the fetch goes through
// the checkpoint's own pipeline (proxy.ServeTool), so the decision, page
// types, mirror grammars, budgets, inject, the checked dialer, the
// decision line (via: tool), the audit chain, metrics and alerts are
// those of any request. A denial comes back as a tool error carrying the
// reason and the rule's message; content comes back as text, HTML turned
// into Markdown, bounded by max_bytes.
//
//	h := tools.Handler(tools.Config{Checkpoint: px, Logger: log})
//	go http.Serve(listener, h) // MCP at /mcp
package tools
