package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/agentkey"
)

// deriveKeys is test-only middleware in front of mcphttp: it gives a
// tools/call that carries no idempotency key one, in _meta.idempotencyKey,
// derived from the tool, its arguments and the rest of its _meta, so that
// the conformance suite's calls (which carry none) take the dedupe path:
// claimed, run, recorded, and replayed when the suite repeats a call. At
// protocol 2026-07-28 a call without a key is never deduplicated (no
// sessions; a new id per retry), so without this the suite would prove
// nothing about the wrapper. The rounds of a multi round-trip call keep
// their _meta and so share the key, as go-sdk's client sends them. Never
// use it outside a test: a real client's key says which calls are retries,
// and a derived one cannot. Keys are salted per process, so a run against a
// store that keeps an earlier run's results (PostgreSQL) runs its calls
// again instead of replaying them all.
func deriveKeys(next http.Handler) http.Handler {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Header.Get("Idempotency-Key") != "" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		r.Body.Close()
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if keyed, ok := withDerivedKey(salt, body); ok {
			body = keyed
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		next.ServeHTTP(w, r)
	})
}

// withDerivedKey returns body with a derived _meta.idempotencyKey, if body
// is a tools/call without a key.
func withDerivedKey(salt, body []byte) ([]byte, bool) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil || string(req["method"]) != `"tools/call"` {
		return nil, false
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(req["params"], &params) != nil || params == nil {
		return nil, false
	}
	if _, ok := params["idempotencyKey"]; ok {
		return nil, false
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return nil, false
	}
	if _, ok := meta["idempotencyKey"]; ok {
		return nil, false
	}
	h := sha256.New()
	h.Write(salt)
	for _, part := range []json.RawMessage{params["name"], params["arguments"], params["_meta"]} {
		canon, err := agentkey.CanonicalJSON(part)
		if err != nil {
			canon = part
		}
		h.Write(canon)
		h.Write([]byte{0})
	}
	key, _ := json.Marshal("derived-" + hex.EncodeToString(h.Sum(nil))[:32])
	meta["idempotencyKey"] = key
	params["_meta"], _ = json.Marshal(meta)
	req["params"], _ = json.Marshal(params)
	out, err := json.Marshal(req)
	return out, err == nil
}

// eventCounts counts mcphttp's events, and reports them when the server
// stops: the conformance script checks that the suite's calls were claimed
// and completed, not passed through.
type eventCounts struct {
	mu sync.Mutex
	n  map[idem.EventKind]int
}

func (c *eventCounts) observe(_ *http.Request, e idem.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[idem.EventKind]int{}
	}
	c.n[e.Kind]++
}

func (c *eventCounts) report(log *slog.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	attrs := []any{}
	for _, k := range []idem.EventKind{idem.EventClaimed, idem.EventCompleted, idem.EventReplayed, idem.EventReleased,
		idem.EventInFlight, idem.EventMismatch, idem.EventStale, idem.EventStoreError, idem.EventRejected} {
		attrs = append(attrs, strings.ReplaceAll(k.String(), " ", "_"), c.n[k])
	}
	log.Info("mcphttp events", attrs...)
}
