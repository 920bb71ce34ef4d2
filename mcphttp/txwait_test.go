package mcphttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// txHarness is a harness whose store is pgstore on a fresh, migrated
// schema, with every tool claimed in a transaction (Options.InTransaction).
func txHarness(t *testing.T, wrap mcphttp.Options) (*harness, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, _ := testdb.Pool(t)
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	wrap.InTransaction = func(string) bool { return true }
	return newHarness(t, harnessOptions{store: store, wrap: wrap}), pool
}

// callAsync sends a tools/call from another goroutine; its one response
// comes on the channel (a zero message if there was none, the failure
// reported), which is closed after it.
func (h *harness) callAsync(t *testing.T, session string, id int, tool, key string) <-chan rpcMessage {
	done := make(chan rpcMessage, 1)
	body := callBody(id, tool, textArgs{Text: "a"}, map[string]any{"idempotencyKey": key})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("tools/call %d: %v", id, err)
			done <- rpcMessage{}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(raw)) {
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			var m rpcMessage
			if ok && json.Unmarshal([]byte(data), &m) == nil && m.Method == "" {
				m.raw = data
				done <- m
				return
			}
		}
		t.Errorf("tools/call %d: HTTP %d with no response: %s", id, resp.StatusCode, raw)
		done <- rpcMessage{}
	}()
	return done
}

// returned is closed once ch, a callAsync's channel, is closed; the
// response stays on ch.
func returned(ch <-chan rpcMessage) (<-chan rpcMessage, <-chan struct{}) {
	out, closed := make(chan rpcMessage, 1), make(chan struct{})
	go func() {
		for m := range ch {
			out <- m
		}
		close(closed)
	}()
	return out, closed
}

// TestInTransactionDuplicateOutwaitsMaxExecution: a duplicate of a call
// whose transaction is open waits for it up to Wait (30 s by default),
// even though MaxExecution, which bounds the statements of a claim's
// transaction, is much shorter; it gets the original's answer once that
// commits, and, with a shorter Wait that runs out first, CodeInFlight.
func TestInTransactionDuplicateOutwaitsMaxExecution(t *testing.T) {
	t.Parallel()
	const maxExecution = 100 * time.Millisecond
	t.Run("the original commits", func(t *testing.T) {
		t.Parallel()
		h, pool := txHarness(t, mcphttp.Options{MaxExecution: maxExecution})
		session := h.initialize(t)
		first := h.callAsync(t, session, 1, "gate", "k")
		<-h.entered
		dup, dupReturned := returned(h.callAsync(t, session, 2, "gate", "k"))
		if !testdb.WaitBlockedFor(t, pool, "idem_keys", 3*maxExecution, dupReturned) {
			close(h.gate)
			<-first
			t.Fatalf("the duplicate was answered %s while the original was still open", (<-dup).raw)
		}
		close(h.gate)
		a, b := <-first, <-dup
		if a.text() == "" || b.text() != a.text() || !b.replayed() || h.runs.get("gate:a") != 1 {
			t.Fatalf("original %s, duplicate %s, %d runs; want the original's result replayed, one run", a.raw, b.raw, h.runs.get("gate:a"))
		}
	})
	t.Run("the wait runs out", func(t *testing.T) {
		t.Parallel()
		const wait = 4 * maxExecution
		h, _ := txHarness(t, mcphttp.Options{MaxExecution: maxExecution, Wait: wait})
		session := h.initialize(t)
		first := h.callAsync(t, session, 1, "gate", "k")
		defer func() { close(h.gate); <-first }()
		<-h.entered
		began := time.Now()
		m := <-h.callAsync(t, session, 2, "gate", "k")
		if m.Error == nil || m.Error.Code != mcphttp.CodeInFlight || m.Error.Data.Reason != mcphttp.ReasonInFlight {
			t.Fatalf("the duplicate: %s; want CodeInFlight, in_flight", m.raw)
		}
		if took := time.Since(began); took < wait {
			t.Errorf("answered after %v, before the wait of %v ran out", took, wait)
		}
	})
}
