package tools

import (
	"bytes"
	"errors"
	"net/http"
)

// capture is the http.ResponseWriter a tool fetch is served into: it keeps
// the head and at most limit bytes of the body; a write past the limit
// fails, which ends the proxy's copy (and the upstream read) there.
type capture struct {
	header    http.Header
	status    int
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func newCapture(limit int) *capture { return &capture{header: http.Header{}, limit: limit} }

var errFull = errors.New("egressd fetch: max_bytes reached")

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *capture) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	room := c.limit - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:room])
		c.truncated = true
		return room, errFull
	}
	return c.buf.Write(p)
}

func (c *capture) code() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}
