package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/egressd/egressd/policy"
)

// A protocol switch turns a checked request into a two-way channel that no
// later check sees. egressd allows one kind only, WebSocket, only inside an
// inspected tunnel and only under a rule with upgrade: [websocket]; h2c and
// every other protocol are refused (reason upgrade).
//
// egressd relays an allowed WebSocket itself rather than through goproxy:
// goproxy v1.9.3 (http.go, websocket.go) relays a 101 with two io.Copy
// loops that have no idle deadline, count no bytes, return when one
// direction ends without closing the hijacked connection, and take the
// upstream from its own Transport. Here the upstream is dialled through
// the checked dialer, the relay is pipe (limits.idle_timeout, byte
// counts), and the open channel is in the tunnel tracker, so a quarantine
// or a reload that no longer allows it closes it.

// upgradeRefusal says why r may not switch protocols under decision d
// ("" when it may): only a WebSocket handshake (GET, no body, Upgrade:
// websocket alone) under a rule that allows it.
func upgradeRefusal(r *http.Request, d *policy.Decision) string {
	up := upgradeOf(r)
	switch {
	case !strings.EqualFold(strings.TrimSpace(up), "websocket"):
		return fmt.Sprintf("Upgrade: %.40s: only websocket can be allowed (upgrade: [websocket]); h2c never", up)
	case r.Header.Get("HTTP2-Settings") != "":
		return "an HTTP2-Settings header asks for h2c, which is never allowed"
	case d.Rule == nil || !d.Rule.WebSocket:
		return fmt.Sprintf("rule %q does not allow it (upgrade: [websocket])", d.RuleName())
	case r.Method != http.MethodGet:
		return "a WebSocket handshake is a GET, not " + r.Method
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return "a WebSocket handshake has no body"
	}
	return ""
}

// isH2C reports an h2c attempt: Upgrade: h2c, or an HTTP2-Settings header.
func isH2C(r *http.Request) bool {
	return headerHas(r.Header, "Upgrade", "h2c") || r.Header.Get("HTTP2-Settings") != ""
}

// serveUpgrade serves a request inside an inspected tunnel that asks to
// switch protocols. It is decided by onRequest like every request (page
// type, methods, paths, header budget); an allowed WebSocket handshake is
// then sent to the origin on a connection from the checked dialer and,
// after the origin's 101, relayed by relayUpgrade. goproxy never sees it.
func (x *Proxy) serveUpgrade(w http.ResponseWriter, r *http.Request, rq *request) {
	rq.relayUpgrade = true
	r = r.WithContext(context.WithValue(r.Context(), keyDecision, rq))
	// r comes back as checked and shaped (header budget, injected credential).
	r, resp := x.onRequest(r, &goproxy.ProxyCtx{})
	if resp == nil && !rq.ws { // onRequest refuses or marks it: this cannot happen
		resp = x.deny(r, rq, policy.ReasonInternal, rq.d.RuleName(), "upgrade neither refused nor allowed")
	}
	if resp != nil {
		writeResponse(w, resp)
		return
	}
	up, br, resp, err := x.upgradeRoundTrip(r, rq)
	if err != nil {
		reason := reasonFor(err)
		detail := err.Error()
		var de *DenyError
		if errors.As(err, &de) {
			rq.d.HighRisk = de.HighRisk
			detail = de.Detail
		}
		writeResponse(w, x.deny(r, rq, reason, rq.d.RuleName(), "upgrade allowed: websocket; "+detail))
		return
	}
	defer up.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		// The origin declined: its answer goes back as a response.
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(resp.StatusCode)
		n, _ := io.Copy(w, resp.Body)
		x.logDecision(r.Context(), rq, resp.StatusCode, "upgrade allowed: websocket; the origin did not switch", n, int64(rq.headBytes))
		return
	}
	if !headerHas(resp.Header, "Upgrade", "websocket") {
		writeResponse(w, x.deny(r, rq, policy.ReasonUpstreamUnreachable, rq.d.RuleName(), fmt.Sprintf("upgrade allowed: websocket; the origin switched to %.40q", resp.Header.Get("Upgrade"))))
		return
	}
	x.relayUpgrade(w, r, rq, up, br, resp)
}

// upgradeRoundTrip sends the handshake to the decided target through the
// checked dialer (TLS, as inside the tunnel) and reads the response head,
// bounded by limits.response_header_timeout and response_header_bytes.
func (x *Proxy) upgradeRoundTrip(r *http.Request, rq *request) (net.Conn, *bufio.Reader, *http.Response, error) {
	lim := x.Policy().Limits
	ctx := r.Context()
	if d := lim.ResponseHeaderTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	c, upAddr, err := x.dialDecidedAt(ctx, rq)
	if err != nil {
		return nil, nil, nil, err
	}
	rq.upAddr = upAddr // a reload checks it again (redecideWebSocket)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(what string, err error) (net.Conn, *bufio.Reader, *http.Response, error) {
		c.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	sni := rq.target.Name
	if sni == "" {
		sni = rq.target.Addr.String()
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: x.tr.TLSClientConfig.RootCAs, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		return fail("TLS handshake with the origin", err)
	}
	out := r.Clone(ctx)
	out.Body, out.ContentLength, out.TransferEncoding = nil, 0, nil
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Keep-Alive", "TE"} {
		out.Header.Del(h)
	}
	if !x.honey.Empty() {
		// no permessage-deflate: compressed frames would hide a
		// honeytoken from the frame scan (wsscan.go)
		out.Header.Del("Sec-WebSocket-Extensions")
	}
	bw := bufio.NewWriter(tc)
	if err := out.Write(bw); err != nil {
		return fail("send upgrade upstream", err)
	}
	if err := bw.Flush(); err != nil {
		return fail("send upgrade upstream", err)
	}
	hl := &headLimit{r: tc, n: -1}
	if lim.ResponseHeaderBytes > 0 {
		hl.n = int64(lim.ResponseHeaderBytes) + upReadBuf
	}
	br := bufio.NewReaderSize(hl, upReadBuf)
	var resp *http.Response
	for n := 0; ; n++ {
		if resp, err = http.ReadResponse(br, out); err != nil {
			return fail("read upgrade response head", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols || n >= upMax1xx {
			break
		}
	}
	hl.n = -1
	if !stop() {
		return fail("read upgrade response head", context.Cause(ctx))
	}
	c.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusSwitchingProtocols && lim.ResponseTimeout > 0 {
		c.SetDeadline(time.Now().Add(lim.ResponseTimeout)) // bounds the refusal's body
	}
	return tc, br, resp, nil
}

// relayUpgrade answers the client with the origin's 101 and relays both
// ways until either side ends, limits.idle_timeout passes without a byte,
// or a quarantine or reload closes it; logged once at the end with the
// bytes each way.
func (x *Proxy) relayUpgrade(w http.ResponseWriter, r *http.Request, rq *request, up net.Conn, br *bufio.Reader, resp *http.Response) {
	hc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.logDecisionReason(r.Context(), rq, 0, policy.ReasonInternal, "upgrade allowed: websocket; hijack: "+err.Error(), 0, 0)
		return
	}
	defer hc.Close()
	hc.SetDeadline(time.Time{}) // net/http's deadlines end with the hijack
	// The client's bytes after the handshake (a first frame in the same
	// write) are in net/http's buffer; the origin's, in br.
	var pre []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pre = slices.Clone(b)
	}
	var head strings.Builder
	fmt.Fprintf(&head, "HTTP/1.1 101 %s\r\n", http.StatusText(http.StatusSwitchingProtocols))
	resp.Header.Write(&head)
	head.WriteString("\r\n")
	early, _ := br.Peek(br.Buffered())
	in := int64(head.Len() + len(early))
	out := int64(rq.headBytes + len(pre))
	client := rawOf(hc)
	if _, err := io.WriteString(client, head.String()); err != nil {
		return
	}
	if _, err := client.Write(early); err != nil {
		return
	}
	if !x.honey.Empty() {
		var pre2 []byte
		client, pre2 = x.scanWebSocket(rq, client, up, hc, pre)
		if pre2 == nil && len(pre) > 0 { // the first frame carried one, or was refused
			reason, detail := policy.ReasonHoneytoken, ""
			if rq.honey != nil {
				detail = honeyDetail(rq.honey)
			} else if c := rq.cutBy.Load(); c != nil {
				reason, detail = c.reason, c.detail
			}
			x.logDecisionReason(context.WithoutCancel(r.Context()), rq, http.StatusSwitchingProtocols, reason, "upgrade websocket "+detail, in, out)
			return
		}
	}
	if _, err := up.Write(pre); err != nil {
		return
	}
	ids := rq.names()
	tracked := &bothConn{Conn: hc, up: up}
	closed := x.tunnelOpened(context.WithoutCancel(r.Context()), rq)
	defer func() {
		for _, id := range ids {
			x.ids.removeTunnel(id, tracked)
		}
		closed()
	}()
	x.trackTunnel(ids, tracked, rq) // a quarantine while the handshake ran cuts it here
	rq.pol = nil                    // an open WebSocket does not keep a retired policy
	idle := x.Policy().Limits.IdleTimeout
	o, i, idled := pipe(client, up, idle)
	out += o
	in += i
	x.m.bytesOut.Add(float64(out))
	x.m.bytesIn.Add(float64(in))
	ctx := context.WithoutCancel(r.Context())
	ci := rq.cutBy.Load()
	if ci == nil && rq.tunnel != nil {
		// A quarantine or reload may close the CONNECT tunnel under it
		// first; cutTunnel records why before it closes.
		ci = rq.tunnel.cutBy.Load()
	}
	if ci != nil {
		rq.d.Allow = false
		x.logDecisionReason(ctx, rq, http.StatusSwitchingProtocols, ci.reason, "upgrade websocket "+ci.detail, in, out)
		return
	}
	detail := "upgrade allowed: websocket"
	if d := idleDetail(idled, idle); d != "" {
		detail += "; " + d
	}
	x.logDecision(ctx, rq, http.StatusSwitchingProtocols, detail, in, out)
}

// rawOf unwraps a hijacked inner connection to the TLS connection under
// it: the request scanner must not read WebSocket frames as HTTP heads.
func rawOf(c net.Conn) net.Conn {
	if n, ok := c.(*notifyConn); ok {
		c = n.Conn
	}
	if s, ok := c.(*scanConn); ok {
		c = s.Conn
	}
	return c
}

// headerHas reports whether a comma-separated header holds token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// bothConn is an open WebSocket as the tracker holds it: a quarantine, a
// reload's cut or the drain closes both ends, so the relay does not wait
// on an origin that says nothing.
type bothConn struct {
	net.Conn // the client's
	up       net.Conn
}

func (c *bothConn) Close() error {
	err := c.Conn.Close()
	c.up.Close()
	return err
}
