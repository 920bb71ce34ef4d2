package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sibling returns a copy of r (method, URL, headers: session, credentials,
// protocol version) that carries body, a JSON-RPC message of method, under
// ctx: how the wrapper speaks to the inner handler as the client would.
func sibling(ctx context.Context, r *http.Request, body []byte, method string) *http.Request {
	pr := r.Clone(ctx)
	pr.Body = io.NopCloser(bytes.NewReader(body))
	pr.ContentLength = int64(len(body))
	pr.GetBody = nil
	if pr.Header.Get("Content-Length") != "" {
		pr.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	if pr.Header.Get("Mcp-Method") != "" {
		pr.Header.Set("Mcp-Method", method)
	}
	pr.Header.Del("Mcp-Name")
	for k := range pr.Header {
		if strings.HasPrefix(k, "Mcp-Param-") {
			delete(pr.Header, k)
		}
	}
	return pr
}

// cancelOnEngineStop arranges that when the engine ends the call's context
// (its lease was lost, its deadline passed, or the server is shutting
// down), the inner handler is told as a client tells it. Before
// ModernProtocol, on a stateful server,
// that is a notifications/cancelled for the call's id on the same session:
// go-sdk runs a stateful session's tools on the session's context, which
// the call's HTTP request context does not end, and the notification is
// what cancels the tool. From ModernProtocol on, and on a stateless server,
// the call's own request is its session, and its context ending (the
// inner request runs on ctx) is the cancellation, as a closed response
// stream is a client's; a notification would land in a fresh session and
// cancel nothing. It returns the function that stops the arrangement once
// the inner handler returned, and waits for a notice under way: none
// outlives the request.
func (m *wrapper) cancelOnEngineStop(ctx context.Context, r *http.Request, c call) (stop func()) {
	if m.stateless || modern(r, c) {
		return func() {}
	}
	done := make(chan struct{})
	notice := func() {
		reason, _ := json.Marshal(context.Cause(ctx).Error())
		var b bytes.Buffer
		b.WriteString(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`)
		b.Write(c.rawID)
		b.WriteString(`,"reason":`)
		b.Write(reason)
		b.WriteString(`}}`)
		nctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), noticeTimeout)
		defer cancel()
		m.next.ServeHTTP(newResponseBuffer(0), sibling(nctx, r, b.Bytes(), "notifications/cancelled"))
	}
	stopNotice := context.AfterFunc(ctx, func() {
		defer close(done)
		notice()
	})
	return func() {
		switch {
		case !stopNotice():
			<-done // under way
		case ctx.Err() != nil:
			// The inner handler returned as soon as the context ended
			// (go-sdk ends the call's stream), before the notice could
			// start: the tool may still run on its session.
			notice()
		}
	}
}

// noticeTimeout bounds the cancellation notice to the inner handler, which
// answers a notification at once (202).
const noticeTimeout = 5 * time.Second
