package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

// onCutOff arranges what the wrapper does when the engine ends the call's
// work context (its lease was lost, its deadline passed, or the server is
// shutting down): it tells the tool, and gives it a lease to answer before
// it ends the inner request too.
//
// The inner request's context is not the work's: go-sdk ends a call's
// stream when its request's context ends and drops the answer the tool
// gives after that, and a tool cut off after its effect must still have
// its answer recorded. So the tool is told its own way. Before
// SessionlessProtocol, on a stateful server, that is a notifications/cancelled
// for the call's id on the same session, as a client sends it: go-sdk runs
// a stateful session's tools on the session's context, and the
// notification cancels the tool. On a stateless server, and from
// SessionlessProtocol on, the call's request is its own session (a notification
// would land in a fresh one): there [ToolCancellation], if the server has
// it, ends the tool's context (tool.work), and nothing else can without
// ending the request.
//
// A lease after the cut-off, if the inner handler is still running, the
// wrapper ends the inner request's context (cause errInnerCutOff): go-sdk
// then ends the call's stream, and a stateless server with
// PropagateRequestCancellation cancels its tool, which is all that can
// stop one without ToolCancellation. Not if [ToolCancellation] took the
// call: its tool was told at the cut-off, and go-sdk's stateless handler
// returns when the tool does, whatever its request's context.
//
// It returns the function that stops the arrangement once the inner
// handler returned, and waits for a notice under way: none outlives the
// request.
func (m *wrapper) onCutOff(work context.Context, r *http.Request, c call, tool *toolCut, endInner context.CancelCauseFunc) (stop func()) {
	notice := func() {}
	if !m.stateless && !modern(r, c) {
		notice = func() { m.noticeCancelled(work, r, c) }
	}
	var (
		mu    sync.Mutex
		grace *time.Timer
	)
	done := make(chan struct{})
	stopWatch := context.AfterFunc(work, func() {
		defer close(done)
		mu.Lock()
		grace = time.AfterFunc(m.eng.Lease(), func() {
			if !tool.taken.Load() {
				endInner(errInnerCutOff)
			}
		})
		mu.Unlock()
		notice()
	})
	return func() {
		switch {
		case !stopWatch():
			<-done // under way
		case work.Err() != nil:
			// The inner handler returned as the context ended, before
			// the notice could start: the tool may still run on its
			// session.
			notice()
		}
		mu.Lock()
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
	}
}

// errInnerCutOff is the cause with which the wrapper ends the inner
// request of a call cut off that did not answer within a lease.
var errInnerCutOff = errors.New("mcphttp: the call was cut off and did not answer within the lease")

// noticeCancelled sends the inner handler a notifications/cancelled for
// the call's id on its session, with the cut-off's cause as the reason.
func (m *wrapper) noticeCancelled(work context.Context, r *http.Request, c call) {
	reason, _ := json.Marshal(context.Cause(work).Error())
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

// noticeTimeout bounds the cancellation notice to the inner handler, which
// answers a notification at once (202).
const noticeTimeout = 5 * time.Second
