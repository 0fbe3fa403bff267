package selftest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// denyHeader marks every refusal egressd makes; a response without it came
// from beyond the proxy.
const denyHeader = "X-Egressd-Deny"

const userAgent = "egressd-selftest"

// userAgent is Config.UserAgent, else egressd-selftest.
func (r *runner) userAgent() string {
	if r.c.UserAgent != "" {
		return r.c.UserAgent
	}
	return userAgent
}

// maxBody bounds what a probe reads of a response body.
const maxBody = 64 << 10

// response is what came back through the proxy.
type response struct {
	status int
	deny   string // X-Egressd-Deny
	body   string
	stage  string // "connect" when the proxy answered the CONNECT itself
	// hello is the ClientHello deadline egressd says it applies to the
	// tunnel (helloDeadlineHeader on its 200), "" if it did not say.
	hello string
}

// helloDeadlineHeader asks egressd for a shorter ClientHello deadline on
// one tunnel, and carries the one it applies on its 200 (proxy's
// HelloDeadlineHeader).
const helloDeadlineHeader = "X-Egressd-Hello-Deadline"

// dialDeadlineHeader bounds how long egressd resolves and dials a
// CONNECT's target before it answers (proxy's DialDeadlineHeader).
const dialDeadlineHeader = "X-Egressd-Dial-Deadline"

// proxyDialError: the proxy itself could not be reached, so nothing
// behind it was tested.
type proxyDialError struct{ error }

func (e *proxyDialError) Unwrap() error { return e.error }

// proxyConn dials the proxy and bounds the connection by ctx.
func (r *runner) proxyConn(ctx context.Context) (net.Conn, func(), error) {
	c, err := r.c.ProxyDial(ctx, "tcp", r.c.Proxy.String())
	if err != nil {
		return nil, nil, &proxyDialError{fmt.Errorf("dial proxy %s: %w", r.c.Proxy, err)}
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	return c, func() { stop(); c.Close() }, nil
}

func readResponse(br *bufio.Reader, req *http.Request) (*response, error) {
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	out := &response{status: resp.StatusCode, deny: resp.Header.Get(denyHeader), hello: resp.Header.Get(helloDeadlineHeader)}
	if req != nil && req.Method == http.MethodConnect && resp.StatusCode == http.StatusOK {
		// The tunnel follows: the "body" is the rest of the connection,
		// and closing it would read the tunnel to its end.
		return out, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	out.body = string(b)
	return out, nil
}

// raw sends a request head exactly as given (Go's client would normalise
// some spellings the probes depend on) and reads the response.
func (r *runner) raw(ctx context.Context, head string) (*response, error) {
	c, done, err := r.proxyConn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := io.WriteString(c, head); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	return readResponse(bufio.NewReader(c), nil)
}

// connect opens a tunnel to hostport through the proxy. resp is the
// proxy's answer; conn and br are usable only when it is 200.
func (r *runner) connect(ctx context.Context, hostport string) (resp *response, conn net.Conn, br *bufio.Reader, done func(), err error) {
	return r.connectWith(ctx, hostport, nil)
}

// connectWith is connect with extra CONNECT headers.
func (r *runner) connectWith(ctx context.Context, hostport string, extra http.Header) (resp *response, conn net.Conn, br *bufio.Reader, done func(), err error) {
	c, done, err := r.proxyConn(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: hostport}, Host: hostport,
		Header: http.Header{"User-Agent": {r.userAgent()}}}
	for k, v := range extra {
		req.Header[k] = v
	}
	if dl, ok := ctx.Deadline(); ok {
		// egressd answers within three quarters of the probe's time, at
		// most of Config.Timeout (504 upstream-timeout if its resolver or
		// the upstream is slower), so an outage reads as untestable, not
		// as no answer, and costs no probe more than a blocked one
		if left := min(time.Until(dl), r.c.Timeout) * 3 / 4; left > 0 {
			req.Header.Set(dialDeadlineHeader, left.Round(time.Millisecond).String())
		}
	}
	setProxyUser(ctx, req.Header)
	if err := req.Write(c); err != nil {
		done()
		return nil, nil, nil, nil, fmt.Errorf("write CONNECT: %w", err)
	}
	br = bufio.NewReader(c)
	resp, err = readResponse(br, req)
	if err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	resp.stage = "connect"
	return resp, c, br, done, nil
}

// bufConn reads what the bufio.Reader already holds before the socket.
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// do sends one request through the proxy: absolute-form for http, CONNECT
// then TLS for https. verify checks the server certificate against
// Config.RootCAs; refusal probes do not verify, since whoever answers, an
// answer from beyond egressd is a leak.
func (r *runner) do(ctx context.Context, q Request, verify bool) (*response, error) {
	method, rawURL, ctype, body := q.Method, q.URL, q.ContentType, q.Body
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", rawURL, err)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("User-Agent", r.userAgent())
	for k, v := range q.Header {
		req.Header.Set(k, v)
	}
	req.Close = true
	if u.Scheme == "http" {
		setProxyUser(ctx, req.Header)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if u.Scheme == "http" {
		c, done, err := r.proxyConn(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
		if err := req.WriteProxy(c); err != nil {
			return nil, fmt.Errorf("write request: %w", err)
		}
		return readResponse(bufio.NewReader(c), req)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	resp, c, br, done, err := r.connect(ctx, net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return nil, err
	}
	defer done()
	if resp.status != http.StatusOK {
		return resp, nil
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{
		ServerName: u.Hostname(),
		RootCAs:    r.c.RootCAs,
		// Refusal probes: the question is only whether a request gets past
		// egressd, which a certificate check cannot answer.
		InsecureSkipVerify: !verify,
		MinVersion:         tls.VersionTLS12,
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake with %s in the tunnel: %w", u.Hostname(), err)
	}
	if err := req.Write(tc); err != nil {
		return nil, fmt.Errorf("write request in the tunnel: %w", err)
	}
	return readResponse(bufio.NewReader(tc), req)
}

// refusal judges a response to a request egressd must refuse. want, if
// set, is the deny reason the refusal must carry.
func refusal(resp *response, want string) outcome {
	got := fmt.Sprintf("%d %s", resp.status, resp.deny)
	if resp.deny == "" {
		got = fmt.Sprintf("%d from beyond egressd", resp.status)
		if resp.stage == "connect" && resp.status == http.StatusOK {
			got = "tunnel established"
		}
		return leak(got, "the request went through the proxy: no egressd refusal came back")
	}
	switch {
	case resp.status == http.StatusServiceUnavailable && resp.deny == "not-ready":
		return errored(got, "the proxy is not ready and refuses everything, so this probe did not exercise the policy")
	case resp.status == http.StatusTooManyRequests:
		return errored(got, "the proxy limited the probe's connections: the probe cannot tell")
	case resp.status == http.StatusForbidden || resp.status == http.StatusBadRequest:
		if want != "" && resp.deny != want {
			return leak(got, fmt.Sprintf("refused as %s, not %s: the target is not recognised as %s, so an allow rule could let it through", resp.deny, want, want))
		}
		return pass(got)
	case resp.status == http.StatusBadGateway || resp.status == http.StatusGatewayTimeout:
		return leak(got, "the policy allowed the request and the proxy tried to reach the target")
	}
	return errored(got, "unexpected answer from the proxy")
}

// proxyErr turns a failure to get any answer through the proxy into an
// outcome: the probe could not tell.
func proxyErr(err error) outcome {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return errored("no answer", "no answer through the proxy in time: "+err.Error())
	}
	return errored("proxy error", err.Error())
}

// upstreamDown says whether egressd answered a CONNECT itself with its
// 502/504 for an upstream that did not resolve or answer: the tunnel was
// allowed and never opened, so nothing inside it was sent or decided.
func upstreamDown(resp *response) bool {
	return resp.stage == "connect" && (resp.status == http.StatusBadGateway || resp.status == http.StatusGatewayTimeout) &&
		(resp.deny == "upstream-unreachable" || resp.deny == "upstream-timeout")
}

// untestableLive is the outcome of a probe whose tunnel an upstream
// outage kept closed; why says what is decided instead.
func untestableLive(resp *response, why string) outcome {
	return untestable(fmt.Sprintf("CONNECT %d %s", resp.status, resp.deny), "untestable live: upstream unreachable; "+why)
}

// neverAllows says whether egressd refused a tunnel the policy allows by
// name because of where the name resolves (a special-use or high-risk
// answer, with no cidrs unlocking it): the rule can never allow anything
// there, so nothing inside the tunnel is reached, nor can it be.
func neverAllows(resp *response) bool {
	return resp.stage == "connect" && resp.status == http.StatusForbidden && (resp.deny == "special-address" || resp.deny == "high-risk")
}

// untestableNever is the outcome of a probe whose tunnel egressd refuses
// because the rule can never allow: its detail carries egressd's refusal
// (the rule, the host, the address and its class).
func untestableNever(resp *response, why string) outcome {
	return untestable(fmt.Sprintf("CONNECT %d %s", resp.status, resp.deny),
		fmt.Sprintf("untestable live: the rule can never allow (%s); %s", strings.TrimSpace(clip(resp.body, 300)), why))
}

// policyDenies is the untestable detail of a request the policy refuses
// offline (Request.InTunnel).
const policyDenies = "the policy denies it"

func (r *runner) refusedRequest(ctx context.Context, q Request, want string) outcome {
	if q.ProxyUser != "" {
		ctx = context.WithValue(ctx, proxyUserKey{}, q.ProxyUser)
	}
	resp, err := r.do(ctx, q, false)
	if err != nil {
		return proxyErr(err)
	}
	switch {
	case q.InTunnel && upstreamDown(resp):
		return untestableLive(resp, policyDenies)
	case q.InTunnel && neverAllows(resp):
		return untestableNever(resp, policyDenies)
	}
	return refusal(resp, want)
}

// tunnelNotOpened judges a CONNECT a checkpoint probe needed that did not
// get its 200; what names the check the tunnel was meant to reach and
// need the target the probe needs. An upstream outage is untestable, as
// for the write probes; not-ready and limits are errors; any other
// refusal means the probe's target is not an allowed tunnel.
func tunnelNotOpened(resp *response, what, need string) outcome {
	switch notOpened := "no tunnel was opened, so " + what + " was not exercised (nothing passed egressd)"; {
	case upstreamDown(resp):
		return untestableLive(resp, notOpened)
	case neverAllows(resp):
		return untestableNever(resp, notOpened)
	}
	if o := refusal(resp, ""); o.status == Error {
		return o // not ready, or limited
	}
	return errored(fmt.Sprintf("CONNECT %d %s", resp.status, resp.deny),
		"the proxy refused the tunnel itself, so "+what+" was not reached: selftest needs "+need+" here")
}

// canaryRequest is the canary URL with the run's token in the query.
func (r *runner) canaryRequest() Request {
	u, _ := url.Parse(r.c.CanaryURL) // checked by Config.check
	q := u.Query()
	q.Set("egressd-selftest", r.token)
	u.RawQuery = q.Encode()
	return Request{ID: "http-canary", Method: http.MethodGet, URL: u.String()}
}

// canaryLog fetches the canary server's request log: the run's token in it
// means the canary request arrived.
func (r *runner) canaryLog(ctx context.Context) outcome {
	b, o := r.canaryLogBody(ctx)
	if b == nil {
		return o
	}
	if strings.Contains(string(b), r.token) {
		return leak("token found", "the canary server logged this run's canary request: it got out")
	}
	var who []string
	for id, tok := range r.c.CanaryTokens {
		if strings.Contains(string(b), tok) {
			who = append(who, id+" (token "+tok+")")
		}
	}
	if len(who) > 0 {
		slices.Sort(who)
		return leak("identity token found", "the canary server logged the canary of "+strings.Join(who, ", ")+": that sandbox's canary got out")
	}
	return pass("token absent")
}

// canaryLogHas looks for tok in the canary server's request log.
func (r *runner) canaryLogHas(ctx context.Context, tok string) outcome {
	b, o := r.canaryLogBody(ctx)
	switch {
	case b == nil:
		return o
	case strings.Contains(string(b), tok):
		return leak("token found", "the canary server logged a canary request with token "+tok)
	}
	return pass("token absent")
}

// canaryLogBody fetches the canary server's request log (with LogDial);
// nil and the outcome to report when it cannot be read.
func (r *runner) canaryLogBody(ctx context.Context) ([]byte, outcome) {
	cl := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: r.c.LogDial, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.c.CanaryLog, nil)
	if err != nil {
		return nil, errored("bad URL", err.Error())
	}
	req.Header.Set("User-Agent", r.userAgent())
	resp, err := cl.Do(req)
	if err != nil {
		return nil, errored("log unreachable", err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, errored("log unreadable", fmt.Sprintf("GET %s: %d %v", r.c.CanaryLog, resp.StatusCode, err))
	}
	if b == nil {
		b = []byte{}
	}
	return b, outcome{}
}

// connectRefused asks for a tunnel to a host no rule covers.
func (r *runner) connectRefused(ctx context.Context, hostport string) outcome {
	resp, _, _, done, err := r.connect(ctx, hostport)
	if err != nil {
		return proxyErr(err)
	}
	done()
	return refusal(resp, "")
}

// rawRefused sends GET rawURL with the given Host header, byte for byte.
func (r *runner) rawRefused(ctx context.Context, rawURL, host, want string) outcome {
	resp, err := r.raw(ctx, "GET "+rawURL+" HTTP/1.1\r\nHost: "+host+"\r\nUser-Agent: "+r.userAgent()+"\r\nConnection: close\r\n\r\n")
	if err != nil {
		return proxyErr(err)
	}
	return refusal(resp, want)
}

func (r *runner) metadataProxy(ctx context.Context, host string) outcome {
	return r.rawRefused(ctx, "http://"+host+"/latest/meta-data/", host, "high-risk")
}

// hostTrick sends an absolute URL for an allowed host with the Host header
// of another: a proxy that forwards it lets a shared front end route the
// request to the other host.
func (r *runner) hostTrick(ctx context.Context) outcome {
	return r.rawRefused(ctx, r.c.HostTrickURL, r.c.HostTrickHost, "")
}

// sniMismatch opens a tunnel to an allowed host and offers TLS with the SNI
// of an unlisted one (domain fronting): the proxy must cut the tunnel
// without a byte from beyond.
func (r *runner) sniMismatch(ctx context.Context) outcome {
	resp, c, br, done, err := r.connect(ctx, r.c.SNIHost)
	if err != nil {
		return proxyErr(err)
	}
	defer done()
	if resp.status != http.StatusOK {
		return tunnelNotOpened(resp, "the SNI check", "a host-only allowed host:port")
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: r.c.SNIName, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	err = tc.HandshakeContext(ctx)
	var oe *net.OpError
	var rh tls.RecordHeaderError
	switch {
	case err == nil:
		return leak("handshake completed", fmt.Sprintf("a TLS handshake with SNI %s completed in a tunnel to %s: domain fronting gets through", r.c.SNIName, r.c.SNIHost))
	case errors.As(err, &oe) && oe.Op == "remote error", errors.As(err, &rh):
		return leak("answered: "+err.Error(), fmt.Sprintf("the far end answered a ClientHello with SNI %s: the tunnel was spliced without an SNI check", r.c.SNIName))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		return pass("tunnel closed")
	}
	if ctx.Err() != nil {
		return errored("no answer", "the tunnel neither closed nor answered in time")
	}
	return errored("handshake failed", err.Error())
}

// reachable is a positive control: the URL must answer through the proxy.
func (r *runner) reachable(ctx context.Context, rawURL string) outcome {
	resp, err := r.do(ctx, Request{Method: http.MethodGet, URL: rawURL}, true)
	var pe *proxyDialError
	switch {
	case errors.As(err, &pe):
		return errored("proxy unreachable", err.Error())
	case err != nil:
		return failed("unreachable", err.Error())
	}
	got := "HTTP " + strconv.Itoa(resp.status)
	switch {
	case resp.deny == "not-ready":
		return errored(fmt.Sprintf("%d %s", resp.status, resp.deny), "the proxy is not ready and refuses everything, so the allowlist was not exercised")
	case resp.deny != "":
		return failed(fmt.Sprintf("%d %s", resp.status, resp.deny), "egressd refused an expect_reachable target: "+strings.TrimSpace(resp.body))
	case resp.status >= 500:
		return failed(got, "the target answered with a server error")
	}
	return pass(got)
}

type proxyUserKey struct{}

// setProxyUser labels a request to the proxy with the identity a probe
// speaks for (Proxy-Authorization user, as a sandbox of that identity
// would), when the probe's context names one.
func setProxyUser(ctx context.Context, h http.Header) {
	if u, _ := ctx.Value(proxyUserKey{}).(string); u != "" {
		h.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u+":egressd-selftest")))
	}
}
