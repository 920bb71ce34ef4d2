package mcphttp

import (
	"bytes"
	"net/http"
)

// responseBuffer is the http.ResponseWriter of a request the wrapper sends
// the inner handler itself (a probe, a cancellation notice): it keeps the
// answer in memory, bounded, and sends nothing to the client. Unlike a
// [recorder], nothing passes through it.
type responseBuffer struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int
}

func newResponseBuffer(limit int) *responseBuffer {
	return &responseBuffer{header: http.Header{}, limit: limit}
}

func (c *responseBuffer) Header() http.Header { return c.header }

func (c *responseBuffer) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status = code
	}
}

func (c *responseBuffer) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := c.limit - c.body.Len(); room > 0 {
		c.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *responseBuffer) Flush() {
	if c.status == 0 {
		c.status = http.StatusOK
	}
}

func (c *responseBuffer) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range c.header {
		h[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(c.status)
	_, _ = w.Write(c.body.Bytes())
}
