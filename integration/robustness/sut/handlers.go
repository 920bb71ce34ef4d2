package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/integration/robustness/wire"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// effectClient calls the effect service: the side effect outside the
// database, where a second execution shows.
type effectClient struct {
	url    string
	client *http.Client
}

func newEffectClient(url string) *effectClient {
	return &effectClient{url: url, client: &http.Client{Timeout: 5 * time.Second}}
}

// do performs the effect. It runs on a context of its own: once sent, the
// effect is the service's, whatever happens to the request.
func (c *effectClient) do(e wire.Effect) (int64, error) {
	body, _ := json.Marshal(e)
	resp, err := c.client.Post(c.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("effect service answered %s", resp.Status)
	}
	var reply wire.EffectReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return 0, err
	}
	return reply.Seq, nil
}

func decodeRequest(r io.Reader) (wire.Request, error) {
	var req wire.Request
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	if req.Key == "" || req.WorkMS < 0 || req.WorkMS > 10_000 {
		return req, errors.New("want a key and 0 <= work_ms <= 10000")
	}
	return req, nil
}

// runEffect is the body shared by /ext and the MCP tool: the effect, then
// the work that follows it, then the answer. It never gives up after the
// effect: the effect happened, and the answer must say so.
func (s *service) runEffect(ctx context.Context, attempt string, gen int64, adapter string, req wire.Request) (wire.Answer, error) {
	exec := s.execID()
	s.log.exec(wire.Record{Op: wire.OpStart, Attempt: attempt, Key: req.Key, Exec: exec, Gen: gen, Adapter: adapter, Variant: req.Variant})
	if req.HonorCtx && ctx.Err() != nil {
		s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusServiceUnavailable, Err: cause(context.Cause(ctx))})
		return wire.Answer{}, fmt.Errorf("cancelled before the effect: %w", context.Cause(ctx))
	}
	seq, err := s.effects.do(wire.Effect{Key: req.Key, Exec: exec, Attempt: attempt, Instance: s.cfg.instance, Variant: req.Variant})
	if err != nil {
		s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusServiceUnavailable, Err: err.Error()})
		return wire.Answer{}, err
	}
	s.log.exec(wire.Record{Op: wire.OpEffect, Attempt: attempt, Key: req.Key, Exec: exec, Seq: seq})
	time.Sleep(time.Duration(req.WorkMS) * time.Millisecond)
	s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusCreated, Seq: seq})
	return wire.Answer{Key: req.Key, Exec: exec, Variant: req.Variant, Seq: seq}, nil
}

// ext is POST /ext: the effect outside the database, recorded by the
// engine once the handler returns.
func (s *service) ext(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRequest(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tok, _ := middleware.TokenFrom(r.Context())
	ans, err := s.runEffect(r.Context(), attemptOf(r.Context()), tok.Generation, middleware.AdapterName, req)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusCreated, ans)
}

// rowExec is one execution of a handler whose effect is a row in
// robust_effects (/db, /tx).
type rowExec struct {
	s       *service
	req     wire.Request
	attempt string
	exec    string
	gen     int64
}

// startRow reads the request and logs the execution's start; false, with
// the 400 answered, if the body is not a request.
func (s *service) startRow(w http.ResponseWriter, r *http.Request) (*rowExec, bool) {
	req, err := decodeRequest(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	tok, _ := middleware.TokenFrom(r.Context())
	x := &rowExec{s: s, req: req, attempt: attemptOf(r.Context()), exec: s.execID(), gen: tok.Generation}
	s.log.exec(wire.Record{Op: wire.OpStart, Attempt: x.attempt, Key: req.Key, Exec: x.exec, Gen: x.gen, Adapter: middleware.AdapterName, Variant: req.Variant})
	return x, true
}

// insert inserts the execution's row through q and logs the effect; false,
// with the 503 answered, if it failed.
func (x *rowExec) insert(ctx context.Context, w http.ResponseWriter, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, bool) {
	var id int64
	if err := q.QueryRow(ctx, `INSERT INTO robust_effects (key, exec, gen, variant) VALUES ($1, $2, $3, $4) RETURNING id`,
		x.req.Key, x.exec, x.gen, x.req.Variant).Scan(&id); err != nil {
		x.fail(w, err)
		return 0, false
	}
	x.s.log.exec(wire.Record{Op: wire.OpEffect, Attempt: x.attempt, Key: x.req.Key, Exec: x.exec, Seq: id})
	return id, true
}

// fail logs and answers a 503 with Retry-After.
func (x *rowExec) fail(w http.ResponseWriter, err error) {
	x.s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: x.attempt, Key: x.req.Key, Exec: x.exec, Code: http.StatusServiceUnavailable, Err: err.Error()})
	w.Header().Set("Retry-After", "1")
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// db is POST /db: a row in robust_effects and the recorded answer, in one
// transaction.
func (s *service) db(w http.ResponseWriter, r *http.Request) {
	x, ok := s.startRow(w, r)
	if !ok {
		return
	}
	ctx, req, attempt, exec := r.Context(), x.req, x.attempt, x.exec
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		x.fail(w, err)
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	id, ok := x.insert(ctx, w, tx)
	if !ok {
		return
	}
	time.Sleep(time.Duration(req.WorkMS) * time.Millisecond)
	body, _ := json.Marshal(wire.Answer{Key: req.Key, Exec: exec, Variant: req.Variant, Seq: id})
	err = middleware.Commit(w, r, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, body,
		func(ctx context.Context, tok idem.Token, res idem.Result) error {
			sent := time.Now()
			err := s.pg.CompleteTx(ctx, tx, tok, res)
			if err == nil {
				err = tx.Commit(ctx)
			}
			rec := wire.Record{Ev: wire.EvStore, Op: "completeTx", Attempt: attempt, Key: req.Key, Gen: tok.Generation, Sent: sent.UnixNano(), Code: res.Status}
			if err != nil {
				rec.Err = cause(err)
			}
			s.log.write(rec)
			return err
		})
	if err != nil {
		// Commit answered 503; the middleware releases the claim.
		s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusServiceUnavailable, Err: cause(err)})
		return
	}
	s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusCreated, Seq: id})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// mcpHandler is /mcp: go-sdk's stateless Streamable HTTP handler with JSON
// responses and the tool "ext", behind mcphttp, which cuts the tool off
// (lease lost, shutdown) through mcphttp.ToolCancellation.
func (s *service) mcpHandler(store idem.Store, logger *slog.Logger, observe func(*http.Request, idem.Event)) http.Handler {
	server := mcp.NewServer(&mcp.Implementation{Name: "robustness-sut", Version: "1"}, nil)
	server.AddReceivingMiddleware(mcphttp.ToolCancellation)
	mcp.AddTool(server, &mcp.Tool{Name: "ext", Description: "the effect outside the database, then its answer"},
		func(ctx context.Context, call *mcp.CallToolRequest, in wire.Request) (*mcp.CallToolResult, any, error) {
			var attempt string
			if call.Extra != nil && call.Extra.Header != nil {
				attempt = call.Extra.Header.Get("X-Attempt")
			}
			ans, err := s.runEffect(ctx, attempt, 0, mcphttp.AdapterName, in)
			if err != nil {
				// A JSON-RPC error: mcphttp releases the key, so a retry
				// runs again.
				return nil, nil, &jsonrpc.Error{Code: -32000, Message: err.Error()}
			}
			b, _ := json.Marshal(ans)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: logger})
	return mcphttp.New(store, mcphttp.Options{
		Engine: engine.Options{
			Lease:        s.cfg.lease,
			Wait:         s.cfg.wait,
			StoreTimeout: s.cfg.storeTimeout,
			Shutdown:     s.cutOff,
			Owner:        s.cfg.instance,
			Logger:       logger,
		},
		Observer:  observe,
		Stateless: true,
	})(inner)
}

// The bounds of POST /tx: its MaxExecution, half the lease, so that
// wire.MisbehaveOvertime can outlive it within the transaction's idle
// bound (the lease); and its record limit, which wire.MisbehaveBig's
// answer outgrows.
func txMaxExecution(lease time.Duration) time.Duration { return lease / 2 }

const txMaxRecord = 4 << 10

// tx is POST /tx: the one-commit path. The row goes into robust_effects in
// the claim's transaction (pgstore.TxFrom), then the handler works for
// WorkMS, ignoring its context, and answers, misbehaving as the request
// says (wire.Misbehave*). Whatever it does, the middleware must send no
// success whose row did not commit.
func (s *service) tx(w http.ResponseWriter, r *http.Request) {
	x, ok := s.startRow(w, r)
	if !ok {
		return
	}
	req, attempt, exec := x.req, x.attempt, x.exec
	id, ok := x.insert(r.Context(), w, pgstore.TxFrom(r.Context()))
	if !ok {
		return
	}
	odd := id%2 == 1
	work := time.Duration(req.WorkMS) * time.Millisecond
	switch {
	case req.Misbehave == wire.MisbehaveOvertime:
		work = max(work, txMaxExecution(s.cfg.lease)+s.cfg.lease/5)
	case req.Misbehave == wire.MisbehaveIdle && odd:
		work = s.cfg.lease + s.cfg.lease/2
	}
	time.Sleep(work)
	ans := wire.Answer{Key: req.Key, Exec: exec, Variant: req.Variant, Seq: id}
	if req.Misbehave == wire.MisbehaveBig {
		ans.Pad = strings.Repeat("x", 2*txMaxRecord)
	}
	body, _ := json.Marshal(ans)
	s.log.exec(wire.Record{Op: wire.OpAnswer, Attempt: attempt, Key: req.Key, Exec: exec, Code: http.StatusCreated, Seq: id})
	w.Header().Set("Content-Type", "application/json")
	switch req.Misbehave {
	case wire.MisbehaveTwice, wire.MisbehaveOvertime:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
		http.Error(w, "and then an error", http.StatusInternalServerError)
	case wire.MisbehaveWriteFirst, wire.MisbehaveIdle:
		_, _ = w.Write(body)
		w.WriteHeader(http.StatusCreated)
	default: // none, MisbehavePanic, MisbehaveBig
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
		if req.Misbehave == wire.MisbehavePanic && odd {
			panic("robustness: the handler panicked after answering")
		}
	}
}
