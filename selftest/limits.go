package selftest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// oversize is how far past HeadBytes the head-limit probe goes: more than
// Go's own slack (4096), so a proxy that trusts Go's limit alone shows.
const oversize = 64 << 10

// silentSlack is how much longer than SilentDeadline the silent-tunnel
// probe waits before it calls the tunnel open.
const silentSlack = 3 * time.Second

// innerHeadLimit opens an inspected tunnel and sends a request head over
// the proxy's limit: egressd must answer 431 itself; any other answer (or
// the head reaching the origin) is a leak of the limit.
func (r *runner) innerHeadLimit(ctx context.Context) outcome {
	tc, done, o := r.inspected(ctx, "the head limit")
	if tc == nil {
		return o
	}
	defer done()
	go func() {
		// Written while the answer is read: a proxy that refuses early
		// stops reading, and the write fails, as it should.
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nX-Egressd-Selftest: ", r.c.InspectHost, userAgent)
		pad := strings.Repeat("a", 4096)
		for n := 0; n < r.c.HeadBytes+oversize; n += len(pad) {
			if _, err := io.WriteString(tc, pad); err != nil {
				return
			}
		}
		io.WriteString(tc, "\r\n\r\n")
	}()
	got, err := readResponse(bufio.NewReader(tc), nil)
	if err != nil {
		if ctx.Err() != nil {
			return errored("no answer", "the proxy neither refused nor answered an oversized head in time")
		}
		return leak("closed without a refusal", "the proxy closed the connection without its 431: "+err.Error())
	}
	res := fmt.Sprintf("%d %s", got.status, got.deny)
	if got.status == http.StatusRequestHeaderFieldsTooLarge && got.deny != "" {
		return pass(res)
	}
	if got.deny == "" {
		return leak(res, fmt.Sprintf("a %d-byte head inside an inspected tunnel got an answer from beyond egressd: the head limit does not hold there", r.c.HeadBytes+oversize))
	}
	return leak(res, "an oversized head was refused for another reason: the head limit did not apply")
}

// inspected opens a tunnel to InspectHost and a TLS session inside it
// (egressd's certificate is not checked: the probe tests egressd's
// answers, not its CA). On failure tc is nil and o says why; what names
// the check the tunnel was meant to reach.
func (r *runner) inspected(ctx context.Context, what string) (tc *tls.Conn, done func(), o outcome) {
	resp, c, br, done, err := r.connect(ctx, r.c.InspectHost)
	if err != nil {
		return nil, nil, proxyErr(err)
	}
	if resp.status != http.StatusOK {
		done()
		return nil, nil, tunnelNotOpened(resp, what, "an inspected allowed host:port")
	}
	host, _, _ := net.SplitHostPort(r.c.InspectHost)
	tc = tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		done()
		return nil, nil, errored("handshake failed", "TLS in the inspected tunnel: "+err.Error())
	}
	return tc, done, outcome{}
}

// h2cUpgrade asks for h2c inside an inspected tunnel: egressd must refuse
// it (403 upgrade) whatever the rule, since an h2c connection would carry
// requests no check sees. An answer from beyond egressd, or a 101, is a
// leak.
func (r *runner) h2cUpgrade(ctx context.Context) outcome {
	tc, done, o := r.inspected(ctx, "the upgrade check")
	if tc == nil {
		return o
	}
	defer done()
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", r.c.InspectHost, userAgent)
	got, err := readResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return errored("no answer", "the proxy neither refused nor answered an h2c upgrade: "+err.Error())
	}
	res := fmt.Sprintf("%d %s", got.status, got.deny)
	switch {
	case got.deny == "upgrade":
		return pass(res)
	case got.status == http.StatusSwitchingProtocols || got.deny == "":
		return leak(res, "an h2c upgrade inside an inspected tunnel got an answer from beyond egressd")
	}
	return errored(res, "the request was refused before the upgrade check: selftest needs an inspected host whose rule allows GET /")
}

// askedSlack is how much later than a deadline the probe asked for (and
// egressd said it applies) a close is reported as late.
const askedSlack = time.Second

// silentTunnel opens a tunnel and sends nothing: the proxy must close it
// within SilentDeadline, or one client can hold descriptors for ever.
// With SilentAsk it asks for that shorter deadline (egressd can only
// shorten a tunnel's wait), so a sealed box is proven in a fraction of a
// second. A close later than the deadline the 200 said applies, but
// within SilentDeadline, passes with the lateness said: on a loaded
// machine timers fire late, and a proof that cries wolf there is
// switched off. A tunnel still open after SilentDeadline is a leak (a
// proxy that did not say so gets silentSlack more). A run that ends
// before the deadline reports the probe cut short, not a leak.
func (r *runner) silentTunnel(ctx context.Context) outcome {
	start := time.Now()
	var extra http.Header
	if r.c.SilentAsk > 0 {
		extra = http.Header{helloDeadlineHeader: {r.c.SilentAsk.String()}}
	}
	resp, c, br, done, err := r.connectWith(ctx, r.c.SilentHost, extra)
	if err != nil {
		return proxyErr(err)
	}
	defer done()
	if resp.status != http.StatusOK {
		return tunnelNotOpened(resp, "the handshake deadline", "an allowed host:port")
	}
	deadline, slack := r.c.SilentDeadline, silentSlack
	var asked time.Duration
	if d, err := time.ParseDuration(resp.hello); err == nil && d > 0 && d < deadline {
		asked = d
	}
	c.SetReadDeadline(start.Add(deadline + slack))
	_, err = br.ReadByte()
	elapsed := time.Since(start)
	took := elapsed.Round(10 * time.Millisecond)
	var ne net.Error
	switch {
	case err == nil:
		return errored("answered", "the far end spoke first in a silent tunnel: the probe cannot tell")
	case (errors.As(err, &ne) && ne.Timeout() || ctx.Err() != nil) && elapsed < deadline:
		// The run ended first (a shutdown, a shorter run deadline):
		// open before its deadline proves nothing.
		return errored("cut short", fmt.Sprintf("the run ended after %s, before the tunnel's deadline of %s: the probe cannot tell", took, deadline))
	case errors.As(err, &ne) && ne.Timeout(), ctx.Err() != nil:
		return leak("still open", fmt.Sprintf("a tunnel that sent nothing was still open after %s: silent tunnels hold descriptors for ever", took))
	case took > deadline+slack, asked > 0 && took > deadline:
		// A proxy that said it applies a shorter deadline is held to
		// its own without the slack a proxy that said nothing gets.
		return leak(fmt.Sprintf("closed after %s", took), fmt.Sprintf("closed later than its deadline of %s", deadline))
	case asked > 0 && took > asked+askedSlack:
		return pass(fmt.Sprintf("closed after %s, later than the %s the proxy said applies (deadline %s)", took, asked, deadline))
	}
	return pass(fmt.Sprintf("closed after %s (deadline %s)", took, deadline))
}
