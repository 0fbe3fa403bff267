package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

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

// refusedTarget is the target a request refused before any rule decided
// it named, when it parses: its decision line then carries that host and
// port like every other (report, suggest, replay and audit need no second
// form).
func refusedTarget(r *http.Request) (policy.Target, bool) {
	var t policy.Target
	var err error
	if r.Method == http.MethodConnect {
		t, err = policy.ParseAuthority(r.RequestURI)
	} else {
		t, err = policy.ParseURL(r.RequestURI)
	}
	return t, err == nil && t.Host() != ""
}
