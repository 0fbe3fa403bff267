package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/egressd/egressd/event"
	"github.com/egressd/egressd/policy"
)

// writeRefusal answers a refused CONNECT with its reason in the status
// line ("403 egressd no-rule"): of a failed tunnel pip, git and curl print
// only that line, never the body. net/http writes only the standard
// reason phrase, so the answer goes out on the hijacked connection; where
// the connection cannot be hijacked (HTTP/2) it goes out as any response.
func writeRefusal(w http.ResponseWriter, resp *http.Response) {
	reason := resp.Header.Get("X-Egressd-Deny")
	c, brw, err := http.NewResponseController(w).Hijack()
	if reason == "" || err != nil {
		writeResponse(w, resp)
		return
	}
	defer c.Close()
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(resp.Body) // egressd's own short text
		resp.Body.Close()
	}
	h := resp.Header.Clone()
	h.Set("Connection", "close")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(brw, "HTTP/1.1 %d egressd %s\r\n", resp.StatusCode, reason)
	h.Write(brw)
	brw.WriteString("\r\n")
	brw.Write(body)
	brw.Flush()
}

// logRefusal logs a request refused before any rule decided it with the
// decision line's full schema: the target's host and port as the request
// named them, rule and page_type empty (never decided), so readers of the
// log (report, suggest, replay, audit) need no second form.
func (x *Proxy) logRefusal(r *http.Request, rq *request, reason policy.Reason, detail string, status int) {
	t := rq.target
	if t.Host() == "" {
		var err error
		if r.Method == http.MethodConnect {
			t, err = policy.ParseAuthority(r.RequestURI)
		} else {
			t, err = policy.ParseURL(r.RequestURI)
		}
		if err != nil {
			t = policy.Target{}
		}
	}
	host, path := t.Host(), t.Path
	if host == "" {
		host, path = r.Host, r.URL.Path
	}
	x.log.LogAttrs(r.Context(), slog.LevelWarn, event.Msg,
		slog.String(event.KeyIdentity, rq.logIdentity()),
		slog.String(event.KeySource, rq.source),
		slog.String(event.KeyView, ""),
		slog.String(event.KeyMethod, r.Method),
		slog.String(event.KeyHost, host),
		slog.Int(event.KeyPort, int(t.Port)),
		slog.String(event.KeyPath, truncate(path, maxLogPath)),
		slog.Int(event.KeyQueryLen, len(t.Query)),
		slog.String(event.KeyPageType, ""),
		slog.String(event.KeyRule, ""),
		slog.String(event.KeyDecision, event.Deny),
		slog.String(event.KeyReason, reason.String()),
		slog.Bool(event.KeyHighRisk, false),
		slog.Int(event.KeyStatus, status),
		slog.Int64(event.KeyBytesIn, 0),
		slog.Int64(event.KeyBytesOut, 0),
		slog.Int64(event.KeyBytes, 0),
		slog.String(event.KeyDetail, detail),
		slog.Bool(event.KeyInspected, false),
	)
}
