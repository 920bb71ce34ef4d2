package mcphttp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

// txHeader names the transaction of a call that runs in one, on the
// request the wrapper passes to the inner handler: go-sdk runs tool
// handlers on their session's context, so the transaction reaches a tool
// through its request's headers (req.Extra.Header), as a random name that
// [TxContext] looks up while the call runs. The wrapper removes the header
// from every request it receives.
const txHeader = "Idem-Transaction"

// inTx are the executions of the calls running in a transaction, by the
// name in their txHeader.
var inTx sync.Map // string -> *engine.Execution

// TxContext returns ctx carrying the transaction the call req was claimed
// in, when it runs in one (Options.InTransactionTools); ctx itself otherwise.
// A go-sdk tool handler calls it first, then writes through the
// transaction the store's package finds there (pgstore.TxFrom, a pgx.Tx;
// pgstore.SQLTxFrom, the same transaction as a *sql.Tx for database/sql
// and the layers on it):
//
//	func(ctx context.Context, req *mcp.CallToolRequest, in Args) (*mcp.CallToolResult, Out, error) {
//		ctx = mcphttp.TxContext(ctx, req)
//		err := pgstore.TxFrom(ctx).QueryRow(ctx, `INSERT INTO invoices …`).Scan(&id)
//		…
//	}
//
// It is needed because go-sdk runs tool handlers on their MCP session's
// context, which the wrapper's request context does not reach.
func TxContext(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req == nil || req.Extra == nil || req.Extra.Header == nil {
		return ctx
	}
	name := req.Extra.Header.Get(txHeader)
	if name == "" {
		return ctx
	}
	if x, ok := inTx.Load(name); ok {
		return x.(*engine.Execution).TxContext(ctx)
	}
	return ctx
}

// inTransaction reports whether call c is claimed inside a transaction of
// the store's database (Options.InTransactionTools).
func (m *wrapper) inTransaction(c call) bool {
	return m.inTx != nil && c.method == "tools/call" && m.inTx(c.name)
}

// heldResponse is the writer a call in a transaction writes its answer to
// (through its recorder): the answer is held back from the client until the
// call's transaction committed with it, since a response whose side effects
// and record may still roll back must not reach the client as a result. It
// keeps the inner handler's status, headers and bytes apart from the
// client's writer until then.
type heldResponse struct {
	client http.ResponseWriter
	x      *engine.Execution
	m      *wrapper
	r      *http.Request
	c      call
	header http.Header
	// sentHeader is header as it was when the handler sent its status:
	// what the answer carries, as net/http sends the header map of that
	// moment, whatever the handler sets after it.
	sentHeader http.Header
	status     int
	body       bytes.Buffer
	// sent: the hold is over, what the handler writes goes to the client;
	// failed: the commit of a spill failed, and nothing may.
	sent, failed bool
	name         string // the call's name in inTx
}

// holdBack puts a held response between rec and the client when the call
// runs in a transaction, and names the transaction on ir, the request to
// the inner handler, for [TxContext]; nil otherwise.
func (m *wrapper) holdBack(rec *recorder, x *engine.Execution, r, ir *http.Request, c call) *heldResponse {
	if !x.InTransaction() {
		return nil
	}
	h := &heldResponse{client: rec.W, x: x, m: m, r: r, c: c, header: http.Header{}, name: rand.Text()}
	inTx.Store(h.name, x)
	ir.Header.Set(txHeader, h.name)
	rec.W = h
	return h
}

// forget removes the call's name from inTx once its execution finished. A
// nil h does nothing.
func (h *heldResponse) forget() {
	if h != nil {
		inTx.Delete(h.name)
	}
}

func (h *heldResponse) Header() http.Header {
	if h.sent {
		return h.client.Header()
	}
	return h.header
}

func (h *heldResponse) WriteHeader(code int) {
	switch {
	case h.sent:
		h.client.WriteHeader(code)
	case h.status == 0 && code >= 200:
		h.status, h.sentHeader = code, h.header.Clone()
	}
}

// Write holds p back. A response that outgrows the record limit cannot be
// held: the transaction commits with the call completed as unreplayable
// (its side effects happened; its response cannot be replayed), then what
// was held goes to the client, and the rest passes through.
func (h *heldResponse) Write(p []byte) (int, error) {
	if h.status == 0 {
		h.WriteHeader(http.StatusOK)
	}
	switch {
	case h.sent:
		return h.client.Write(p)
	case h.failed:
		return len(p), nil
	case h.body.Len()+len(p) <= h.m.maxRecord:
		return h.body.Write(p)
	}
	if err := h.x.Commit(idem.Result{Status: h.status, Unreplayable: true}); err != nil {
		h.failed = true
		return len(p), nil
	}
	h.release()
	return h.client.Write(p)
}

// Flush does nothing while the response is held: it is sent whole, after
// the commit.
func (h *heldResponse) Flush() {
	if h.sent {
		_ = http.NewResponseController(h.client).Flush()
	}
}

// verdict is v, the recorder's reading of how the call ended, unless the
// call's transaction already committed (a response that outgrew the record
// limit completed the key as unreplayable): then the key is completed,
// whatever came after, and that is what the engine reports. A nil h
// returns v.
func (h *heldResponse) verdict(v engine.Verdict) engine.Verdict {
	if h == nil || !h.x.Committed() {
		return v
	}
	return engine.Verdict{Action: engine.CompletedByWork, Result: idem.Result{Status: h.status, Unreplayable: true}}
}

// release sends what was held and ends the hold.
func (h *heldResponse) release() {
	h.sent = true
	hd := h.client.Header()
	hdr := h.sentHeader
	if hdr == nil { // the handler sent no status
		hdr = h.header
	}
	for k, vs := range hdr {
		hd[k] = vs
	}
	h.client.WriteHeader(h.status)
	_, _ = h.client.Write(h.body.Bytes())
}

// send ends the hold once the call's execution finished with verdict v:
// the response goes to the client if its transaction committed with it, or
// if it was not to be recorded (an error, rolled back with everything
// else, is true as it is) and PostgreSQL did not end the transaction;
// otherwise its result did not commit (or the commit's outcome is
// unknown), and the client gets a JSON-RPC error, in the response's
// framing: saying to retry with the same key, or, when PostgreSQL ended
// the transaction at one of its bounds, which bound and which setting to
// raise ([ReasonTransactionLimit]), since a retry would end the same way.
// A nil h does nothing.
func (h *heldResponse) send(v engine.Verdict) {
	switch {
	case h == nil || h.sent:
	case !h.failed && (h.x.Committed() || (v.Action == engine.Release || v.Action == engine.LeaveToLease) && h.x.TxLimitErr() == nil):
		h.status = cmp.Or(h.status, http.StatusOK)
		h.release()
	default:
		h.sent = true
		e := rpcError{
			Code: CodeUnavailable, Message: "the call's transaction did not commit, or the outcome of its commit is unknown; retry it with the same key: if it committed, the retry gets its response, if not, it runs again",
			Data: errorData{Reason: ReasonUnavailable, RetryAfterMs: h.m.eng.RetryAfter().Milliseconds()},
		}
		if le := h.x.TxLimitErr(); le != nil {
			e = transactionLimit(le)
		}
		body, _ := wrapperError(h.c.rawID, e)
		h.m.answer(h.client, h.r, h.c, body, false, &responseBuffer{header: h.header, status: cmp.Or(h.status, http.StatusOK)})
	}
}

// ReasonTransactionLimit is the data.reason of the [CodeInternalError]
// answered for a call of a tool in InTransaction whose transaction
// PostgreSQL ended at one of its bounds (the tool paused between two
// statements longer than Options.Engine.IdleInTransaction, or a statement ran
// longer than its statement_timeout): nothing of the call took effect,
// and the message names the bound and the setting to raise. A retry runs
// the tool again, and ends the same way if it takes as long.
const ReasonTransactionLimit = "transaction_limit"

// transactionLimit is the error of a call whose transaction PostgreSQL
// ended at the bound le.
func transactionLimit(le *idem.TxLimitError) rpcError {
	return rpcError{
		Code:    CodeInternalError,
		Message: "the database ended the call's transaction, so it took no effect: " + engine.ExplainTxLimit(le),
		Data:    errorData{Reason: ReasonTransactionLimit},
	}
}
