package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/integration/robustness/wire"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/middleware"
)

// toolRetryable is the JSON-RPC error the service's MCP tool answers when it
// did not take effect (robustness/sut).
const toolRetryable = -32000

// The clients: 12 workers over 6 active keys (a key takes 2–6 logical
// requests, then a new one replaces it), retrying after errors, time-outs
// (4 s), 409 (after Retry-After) and 503, with jitter, up to 8 tries or
// 15 s; two retries in three go to another instance. 6% of attempts hang up
// at a random moment, 3% send part of the body and close; once a key was
// replayed, clients send it with another body (a probe: it must get 422 and
// never run).
//
// Kinds of key: which route, adapter and effect a key's requests take.
const (
	kindExt = "ext" // POST /ext: the effect outside the database, two-phase
	kindDB  = "db"  // POST /db: the effect in the database, committed with the answer
	kindMCP = "mcp" // tools/call "ext" over MCP: the effect outside the database
	// kindTx is POST /tx: the effect in the database, on the one-commit
	// path (InTransaction), with a handler that misbehaves as its key says.
	kindTx = "tx"
)

// misbehaviours are those of the POST /tx handler (wire.Misbehave*), ""
// for a handler that behaves.
var misbehaviours = []string{"", wire.MisbehaveTwice, wire.MisbehaveWriteFirst, wire.MisbehavePanic,
	wire.MisbehaveOvertime, wire.MisbehaveIdle, wire.MisbehaveBig}

// Outcomes of an attempt, as the client saw it.
const (
	outAnswer       = "answer"       // 2xx (or a tool result) from an execution, not a replay
	outReplay       = "replay"       // 2xx (or a tool result) marked Idempotent-Replayed
	outUnreplayable = "unreplayable" // 410: completed with an answer too large to record (POST /tx)
	outMismatch     = "mismatch"     // 422 (or mcphttp.CodeKeyReused): the key was used for another body
	outInFlight     = "in-flight"    // 409 (or mcphttp.CodeInFlight)
	outUnavailable  = "unavailable"  // 503 (or mcphttp.CodeUnavailable), or the tool's retryable error
	outError        = "error"        // no answer: connection error, time-out, the client hung up
	// outUnexpected is anything the promise does not allow, among them an
	// MCP call answered HTTP 200 with no JSON-RPC response at all (the
	// client cannot tell what happened).
	outUnexpected = "unexpected"
)

// attempt is one HTTP request of a client: one operation of the history.
type attempt struct {
	ID       string
	Worker   int
	Logical  int // the client's logical request, across its retries
	Try      int
	Key      string
	Kind     string
	Instance int
	Variant  string // "main", or a probe's other body
	Fault    string // the client's own fault: "", "hangup", "midbody"
	Start    int64
	End      int64

	Outcome    string
	Status     int
	Exec       string // the answer's execution
	Detail     string
	RetryAfter time.Duration
}

func (a *attempt) probe() bool { return a.Variant != "main" }

// final reports whether a client stops retrying after a.
func (a *attempt) final() bool {
	switch a.Outcome {
	case outAnswer, outReplay, outUnreplayable, outMismatch, outUnexpected:
		return true
	}
	return false
}

// keyState is one key of the key space.
type keyState struct {
	name     string
	kind     string
	req      wire.Request
	budget   int // logical requests it gets before it is retired
	uses     int
	replayed bool // a client got a replay: the key is recorded, probes may follow
	probes   int
}

// keySpace is the small set of keys the clients share, so that they
// collide: each key takes a few logical requests, then a fresh one takes
// its place.
type keySpace struct {
	mu     sync.Mutex
	r      *rand.Rand
	active []*keyState
	all    []*keyState
	next   int
}

func newKeySpace(seed int64, size int) *keySpace {
	ks := &keySpace{r: rand.New(rand.NewPCG(uint64(seed), 0xcafe))}
	for range size {
		ks.active = append(ks.active, ks.fresh())
	}
	return ks
}

// fresh makes a new key (with ks.mu held or before the clients start).
func (ks *keySpace) fresh() *keyState {
	ks.next++
	kind := []string{kindExt, kindExt, kindDB, kindDB, kindMCP, kindMCP, kindExt, kindTx, kindTx}[ks.r.IntN(9)]
	k := &keyState{name: fmt.Sprintf("%s-%d", kind, ks.next), kind: kind, budget: 2 + ks.r.IntN(5)}
	k.req = wire.Request{Key: k.name, Variant: "main", WorkMS: []int{0, 20, 100, 300, 600, 900, 1500}[ks.r.IntN(7)], HonorCtx: ks.r.IntN(2) == 0}
	if kind == kindTx {
		// Work within the transaction's idle bound (the lease): only
		// MisbehaveIdle leaves it idle for longer, and only on some
		// executions, so that every key can be answered.
		k.req.WorkMS = []int{0, 20, 100, 300}[ks.r.IntN(4)]
		k.req.HonorCtx = false
		k.req.Misbehave = misbehaviours[ks.r.IntN(len(misbehaviours))]
	}
	ks.all = append(ks.all, k)
	return k
}

// pick chooses a key for a logical request, and whether it is a probe:
// the same key with another body, sent only once the key is known to be
// recorded.
func (ks *keySpace) pick(r *rand.Rand) (*keyState, wire.Request) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	i := r.IntN(len(ks.active))
	k := ks.active[i]
	if k.replayed && k.probes < 2 && r.IntN(6) == 0 {
		k.probes++
		req := k.req
		req.Variant = fmt.Sprintf("probe-%d", k.probes)
		return k, req
	}
	k.uses++
	if k.uses >= k.budget {
		ks.active[i] = ks.fresh()
	}
	return k, k.req
}

func (ks *keySpace) markReplayed(k *keyState) {
	ks.mu.Lock()
	k.replayed = true
	ks.mu.Unlock()
}

func (ks *keySpace) keys() []*keyState {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return append([]*keyState(nil), ks.all...)
}

// recorder is the history: every attempt of every client.
type recorder struct {
	mu       sync.Mutex
	attempts []*attempt
}

func (h *recorder) add(a *attempt) {
	h.mu.Lock()
	h.attempts = append(h.attempts, a)
	h.mu.Unlock()
}

func (h *recorder) snapshot() []attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]attempt, len(h.attempts))
	for i, a := range h.attempts {
		out[i] = *a
	}
	return out
}

func (h *recorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.attempts)
}

// client is one worker: a retrying client, as real ones are. Each logical
// request is retried after errors, time-outs, 409 (after Retry-After) and
// 503, with jitter, to a random instance (often another one), until it is
// answered or the client gives up.
type client struct {
	id      int
	r       *rand.Rand
	c       *cluster
	keys    *keySpace
	hist    *recorder
	http    *http.Client
	logical int
	seq     int
}

const (
	attemptTimeout = 4 * time.Second
	maxTries       = 8
	giveUpAfter    = 15 * time.Second
)

func newClient(id int, seed int64, c *cluster, keys *keySpace, hist *recorder) *client {
	return &client{
		id: id, r: rand.New(rand.NewPCG(uint64(seed), uint64(id)+1)), c: c, keys: keys, hist: hist,
		// No keep-alive: net/http resends a request carrying an
		// Idempotency-Key on a reused connection that failed, which would
		// hide an attempt from the history.
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
}

// run sends logical requests until ctx ends.
func (cl *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		k, req := cl.keys.pick(cl.r)
		cl.request(ctx, k, req, giveUpAfter, true)
	}
}

// request is one logical request, retried until it is answered, the
// bound runs out or ctx ends. It returns the last attempt.
func (cl *client) request(ctx context.Context, k *keyState, req wire.Request, bound time.Duration, faults bool) *attempt {
	cl.logical++
	began := time.Now()
	inst := cl.r.IntN(len(cl.c.nodes))
	var last *attempt
	for try := 0; ; try++ {
		if try > 0 && cl.r.IntN(3) > 0 {
			// Retry at another instance, as a load balancer would.
			inst = (inst + 1 + cl.r.IntN(len(cl.c.nodes)-1)) % len(cl.c.nodes)
		}
		fault := ""
		if faults {
			switch x := cl.r.IntN(100); {
			case x < 6:
				fault = "hangup"
			case x < 9:
				fault = "midbody"
			}
		}
		last = cl.send(ctx, k, req, inst, try, fault)
		if last.Outcome == outReplay || last.Outcome == outUnreplayable {
			cl.keys.markReplayed(k)
		}
		if last.final() || req.Variant != "main" || ctx.Err() != nil {
			return last
		}
		if try+1 >= maxTries && faults || time.Since(began) > bound {
			return last
		}
		pause := min(50*time.Millisecond<<min(try, 5), time.Second)
		if last.RetryAfter > 0 {
			pause = last.RetryAfter
		}
		pause += time.Duration(cl.r.Int64N(int64(pause/2) + 1))
		select {
		case <-ctx.Done():
			return last
		case <-time.After(pause):
		}
	}
}

// send makes one attempt and records it.
func (cl *client) send(ctx context.Context, k *keyState, req wire.Request, inst, try int, fault string) *attempt {
	cl.seq++
	a := &attempt{
		ID: fmt.Sprintf("w%d-%d", cl.id, cl.seq), Worker: cl.id, Logical: cl.logical, Try: try,
		Key: k.name, Kind: k.kind, Instance: inst, Variant: req.Variant, Fault: fault,
	}
	path, body := "/"+k.kind, mustJSON(req)
	if k.kind == kindMCP {
		path = "/mcp"
		body = mustJSON(map[string]any{
			"jsonrpc": "2.0", "id": cl.seq, "method": "tools/call",
			"params": map[string]any{"name": "ext", "arguments": req, "_meta": map[string]any{"idempotencyKey": k.name}},
		})
	}
	n := cl.c.nodes[inst]
	a.Start = cl.c.clock.now()
	if fault == "midbody" {
		cl.midBody(n.addr, path, k, a, body)
	} else {
		cl.do(ctx, n.url()+path, k, a, body, fault == "hangup")
	}
	a.End = cl.c.clock.now()
	cl.hist.add(a)
	return a
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (cl *client) headers(h http.Header, k *keyState, a *attempt) {
	h.Set("Content-Type", "application/json")
	h.Set("X-Attempt", a.ID)
	if k.kind == kindMCP {
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("Mcp-Protocol-Version", "2025-11-25")
	} else {
		h.Set("Idempotency-Key", k.name)
	}
}

// do sends the request and reads the answer; with hangup, the client goes
// away at a random moment before it is answered.
func (cl *client) do(ctx context.Context, url string, k *keyState, a *attempt, body []byte, hangup bool) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	if hangup {
		var stop context.CancelFunc
		actx, stop = context.WithTimeout(actx, time.Duration(cl.r.IntN(1200))*time.Millisecond)
		defer stop()
	}
	hr, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	cl.headers(hr.Header, k, a)
	resp, err := cl.http.Do(hr)
	if err != nil {
		a.Outcome, a.Detail = outError, err.Error()
		return
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		a.Outcome, a.Detail = outError, "reading the answer: "+err.Error()
		return
	}
	a.Status = resp.StatusCode
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil {
			a.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	replayed := resp.Header.Get("Idempotent-Replayed") == "true"
	if k.kind == kindMCP {
		classifyMCP(a, resp.StatusCode, rb, replayed)
	} else {
		classifyHTTP(a, resp.StatusCode, rb, replayed)
	}
}

// problemType is the "type" of an RFC 9457 problem body, "" for any other.
func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Type
}

func classifyHTTP(a *attempt, status int, body []byte, replayed bool) {
	switch {
	case status == http.StatusCreated || a.Kind == kindTx && status >= 200 && status < 300:
		// A success: its body must be the answer. (POST /tx's handler
		// may write more after it, and may imply 200 by writing first.)
		var ans wire.Answer
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&ans); err != nil || ans.Exec == "" || ans.Key != a.Key {
			a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("%d with body %.300q", status, body)
			return
		}
		a.Exec = ans.Exec
		a.Outcome = outAnswer
		if replayed {
			a.Outcome = outReplay
		}
	case status == http.StatusUnprocessableEntity:
		a.Outcome = outMismatch
	case status == http.StatusGone && a.Kind == kindTx:
		a.Outcome = outUnreplayable
	case status == http.StatusConflict:
		a.Outcome = outInFlight
	case status == http.StatusInternalServerError && a.Kind == kindTx && problemType(body) == middleware.TypeTransactionLimit:
		// A bound ended the transaction (MisbehaveIdle past the idle
		// bound): nothing of it took effect, and a retry may run it again.
		a.Outcome, a.Detail = outUnavailable, "transaction limit"
	case status == http.StatusServiceUnavailable:
		a.Outcome = outUnavailable
		if a.RetryAfter == 0 {
			a.Outcome, a.Detail = outUnexpected, "503 without Retry-After: "+strings.TrimSpace(string(body))
		}
	default:
		a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("%d %s", status, bytes.TrimSpace(body))
	}
}

func classifyMCP(a *attempt, status int, body []byte, replayed bool) {
	if status != http.StatusOK {
		a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("HTTP %d %s", status, bytes.TrimSpace(body))
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		a.Outcome, a.Detail = outUnexpected, "HTTP 200 with no JSON-RPC response"
		return
	}
	var msg struct {
		Result *struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				RetryAfterMs int64 `json:"retryAfterMs"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("not JSON-RPC: %q", body)
		return
	}
	switch {
	case msg.Error != nil:
		a.Status = msg.Error.Code
		a.RetryAfter = time.Duration(msg.Error.Data.RetryAfterMs) * time.Millisecond
		switch msg.Error.Code {
		case mcphttp.CodeKeyReused:
			a.Outcome = outMismatch
		case mcphttp.CodeInFlight:
			a.Outcome = outInFlight
		case mcphttp.CodeUnavailable, toolRetryable:
			a.Outcome = outUnavailable
		default:
			a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("JSON-RPC error %d %s", msg.Error.Code, msg.Error.Message)
		}
		a.Detail = msg.Error.Message
	case msg.Result != nil && !msg.Result.IsError && len(msg.Result.Content) == 1:
		var ans wire.Answer
		if err := json.Unmarshal([]byte(msg.Result.Content[0].Text), &ans); err != nil || ans.Exec == "" || ans.Key != a.Key {
			a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("tool result %q", body)
			return
		}
		a.Status, a.Exec, a.Outcome = 200, ans.Exec, outAnswer
		if replayed {
			a.Outcome = outReplay
		}
	default:
		a.Outcome, a.Detail = outUnexpected, fmt.Sprintf("tool result %q", body)
	}
}

// midBody sends the request's headers and part of its body, then closes
// the connection: the server never gets the whole request.
func (cl *client) midBody(addr, path string, k *keyState, a *attempt, body []byte) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		a.Outcome, a.Detail = outError, err.Error()
		return
	}
	defer conn.Close()
	h := http.Header{}
	cl.headers(h, k, a)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, addr, len(body))
	_ = h.Write(&b)
	b.WriteString("\r\n")
	b.Write(body[:cl.r.IntN(len(body))])
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write(b.Bytes()); err != nil && !errors.Is(err, net.ErrClosed) {
		a.Detail = err.Error()
	}
	time.Sleep(time.Duration(cl.r.IntN(300)) * time.Millisecond)
	a.Outcome = outError
	if a.Detail == "" {
		a.Detail = "the client hung up in the middle of the body"
	}
}
