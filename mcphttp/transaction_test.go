package mcphttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/pgstore"
)

// newTxStore is a migrated schema with an invoices table and a store on
// it.
func newTxStore(t *testing.T) (context.Context, *pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	k := teststore.NewKit(t, pgstore.Options{}, `CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text NOT NULL)`)
	return k.Ctx, k.Pool, k.Store
}

// TestInTransaction: a tool whose side effect is a row in the store's
// database (Options.InTransactionTools) writes it in the transaction its call
// was claimed in, and the row and the call's response commit together: a
// retry replays the response and finds one row; a call that answers a
// JSON-RPC error leaves nothing, and its retry runs the tool again. A tool
// left out of InTransaction is claimed on its own and gets no transaction.
// The tools write through pgx (pgstore.TxFrom) and through database/sql
// (pgstore.SQLTxFrom) alike.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		testInTransaction(t, func(ctx context.Context, customer string) (int64, error) {
			tx := pgstore.TxFrom(ctx)
			if tx == nil {
				return 0, fmt.Errorf("no transaction in the tool's context")
			}
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO invoices (customer) VALUES ($1) RETURNING id`, customer).Scan(&id)
			return id, err
		})
	})
	t.Run("database/sql", func(t *testing.T) {
		t.Parallel()
		testInTransaction(t, func(ctx context.Context, customer string) (int64, error) {
			tx := pgstore.SQLTxFrom(ctx)
			if tx == nil {
				return 0, fmt.Errorf("no transaction in the tool's context")
			}
			var id int64
			err := tx.QueryRowContext(ctx, `INSERT INTO invoices (customer) VALUES ($1) RETURNING id`, customer).Scan(&id)
			return id, err
		})
	})
}

func testInTransaction(t *testing.T, write func(ctx context.Context, customer string) (int64, error)) {
	ctx, pool, store := newTxStore(t)
	var runs, failures atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "mcphttp-tx-test", Version: "1"}, nil)
	insert := func(ctx context.Context, req *mcp.CallToolRequest, customer string) (int64, error) {
		return write(mcphttp.TxContext(ctx, req), customer)
	}
	mcp.AddTool(server, &mcp.Tool{Name: "create"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		id, err := insert(ctx, req, in.Text)
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("invoice %d", id)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "create_then_fail"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		failures.Add(1)
		if _, err := insert(ctx, req, in.Text); err != nil {
			return nil, nil, err
		}
		return nil, nil, &jsonrpc.Error{Code: -32000, Message: "failed after the insert"}
	})
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	mcp.AddTool(server, &mcp.Tool{Name: "gated"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		id, err := insert(ctx, req, in.Text)
		if err != nil {
			return nil, nil, err
		}
		entered <- struct{}{}
		<-gate
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("invoice %d", id)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "elsewhere"}, func(ctx context.Context, req *mcp.CallToolRequest, _ textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("transaction %v", pgstore.TxFrom(mcphttp.TxContext(ctx, req)) != nil)}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	wrapped := mcphttp.New(store, mcphttp.Options{InTransactionTools: func(tool string) bool { return tool != "elsewhere" }})(inner)
	srv := httptest.NewServer(wrapped)
	defer srv.Close()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(tool, key string) (string, error) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "acme"}, Meta: mcp.Meta{"idempotencyKey": key}})
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", fmt.Errorf("tool error %s", res.Content[0].(*mcp.TextContent).Text)
		}
		return res.Content[0].(*mcp.TextContent).Text, nil
	}
	invoices := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first, err := call("create", "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := call("create", "k1")
	if err != nil || again != first || runs.Load() != 1 || invoices() != 1 {
		t.Fatalf("retry: %q, %v, after %q; %d runs, %d invoices; want a replay, 1 run, 1 invoice", again, err, first, runs.Load(), invoices())
	}

	for range 2 {
		if _, err := call("create_then_fail", "k2"); err == nil {
			t.Fatal("create_then_fail succeeded")
		}
	}
	if failures.Load() != 2 || invoices() != 1 {
		t.Fatalf("a call answering an error: %d runs for two calls, %d invoices; want 2 and 1 (rolled back, run again)", failures.Load(), invoices())
	}

	if got, err := call("elsewhere", "k3"); err != nil || got != "transaction false" {
		t.Fatalf("a tool outside InTransaction: %q, %v", got, err)
	}

	// A duplicate of a call whose transaction is open waits for it (in
	// PostgreSQL, on the key's row) and gets its response.
	type answer struct {
		text string
		err  error
	}
	first2, dup := make(chan answer, 1), make(chan answer, 1)
	go func() { text, err := call("gated", "k4"); first2 <- answer{text, err} }()
	<-entered
	go func() { text, err := call("gated", "k4"); dup <- answer{text, err} }()
	testdb.WaitLockWaiter(t, pool, "idem_keys") // the duplicate is waiting
	close(gate)
	a, b := <-first2, <-dup
	if a.err != nil || b.err != nil || a.text != b.text || runs.Load() != 2 || invoices() != 2 {
		t.Fatalf("original %q, %v; duplicate %q, %v; %d runs, %d invoices; want one run and the duplicate answered its response",
			a.text, a.err, b.text, b.err, runs.Load(), invoices())
	}
}

// statusLog is the client's end of a response: every status it is sent,
// with the invoices committed at that moment, and the body.
type statusLog struct {
	header    http.Header
	committed func() int
	sent      [][2]int // status, invoices committed
	types     []string // the Content-Type sent with each status
	body      strings.Builder
}

func (c *statusLog) Header() http.Header { return c.header }
func (c *statusLog) WriteHeader(code int) {
	c.sent = append(c.sent, [2]int{code, c.committed()})
	c.types = append(c.types, c.header.Get("Content-Type"))
}
func (c *statusLog) Write(p []byte) (int, error) {
	if len(c.sent) == 0 {
		c.WriteHeader(http.StatusOK)
	}
	return c.body.Write(p)
}
func (c *statusLog) Flush() {}

// TestInTransactionHoldsEverything: while a call's answer is held, nothing
// of the inner handler's reaches the client, in whatever order it calls
// the writer (a second status, a status after a write, an informational
// status, flushes). When the commit fails (a statement of the tool failed,
// so COMMIT rolls back), the client gets one answer, the JSON-RPC error
// saying the call took no effect; when it succeeds, the handler's, sent
// once its invoice is committed.
func TestInTransactionHoldsEverything(t *testing.T) {
	t.Parallel()
	ctx, pool, store := newTxStore(t)
	invoices := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	misbehaviours := map[string]func(w http.ResponseWriter, answer string){
		"status twice": func(w http.ResponseWriter, answer string) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, answer)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusInternalServerError)
		},
		"write then status": func(w http.ResponseWriter, answer string) {
			_, _ = io.WriteString(w, answer)
			w.WriteHeader(http.StatusAccepted)
		},
		"early hints and flushes": func(w http.ResponseWriter, answer string) {
			w.WriteHeader(http.StatusEarlyHints)
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, answer)
			w.(http.Flusher).Flush()
		},
	}
	for name, misbehave := range misbehaviours {
		for _, broken := range []bool{true, false} {
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tctx := mcphttp.TxContext(r.Context(), &mcp.CallToolRequest{Extra: &mcp.RequestExtra{Header: r.Header}})
				tx := pgstore.TxFrom(tctx)
				var id int64
				if err := tx.QueryRow(tctx, `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id); err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				if broken {
					_, _ = tx.Exec(tctx, `SELECT 1/0`) // ignored: COMMIT will roll back
				}
				w.Header().Set("Content-Type", "application/json")
				misbehave(w, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"invoice %d"}]}}`, id))
			})
			h := mcphttp.New(store, mcphttp.Options{InTransactionTools: func(string) bool { return true }})(inner)
			before := invoices()
			client := &statusLog{header: http.Header{}, committed: invoices}
			h.ServeHTTP(client, callRequest(fmt.Sprintf("%s-%v", name, broken)))
			after := invoices()
			if broken {
				if len(client.sent) != 1 || client.sent[0][0] != http.StatusOK || after != before ||
					!strings.Contains(client.body.String(), fmt.Sprint(mcphttp.CodeUnavailable)) ||
					// The wrapper cannot tell a rollback from a commit whose
					// outcome was lost with the connection: it must not say
					// the call took no effect.
					strings.Contains(client.body.String(), "no effect") || !strings.Contains(client.body.String(), "unknown") {
					t.Errorf("%s, the commit failing: the client was sent %v, body %q; %d invoices committed; want one 200 with the JSON-RPC error, nothing committed",
						name, client.sent, client.body.String(), after-before)
				}
				continue
			}
			const want = http.StatusOK // the first final status, or implied by the first write
			if len(client.sent) != 1 || client.sent[0] != [2]int{want, before + 1} || after != before+1 || !strings.Contains(client.body.String(), "invoice") ||
				client.types[0] != "application/json" { // a header set after the status does not count, as in net/http
				t.Errorf("%s, the commit succeeding: the client was sent %v (invoices before: %d), body %q; want one status %d, sent after its invoice committed",
					name, client.sent, before, client.body.String(), want)
			}
		}
	}
}

// TestInTransactionSpillReported: a call whose answer outgrows the record
// limit commits early, its key completed as unreplayable, and its answer
// streams on. However the call ends after that (its response, an error,
// or a stream that ends without a response), the wrapper reports what
// happened: the completion, never a release, and no rollback in its logs;
// a retry is answered unreplayable and not run.
func TestInTransactionSpillReported(t *testing.T) {
	t.Parallel()
	_, _, store := newTxStore(t)
	big := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + strings.Repeat("x", 2048) + `"}}`
	for name, end := range map[string]string{
		"response":           `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}`,
		"error":              `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"failed after the notification"}}`,
		"no response at all": "",
	} {
		var mu sync.Mutex
		var kinds []idem.EventKind
		var logs strings.Builder
		runs := 0
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if body, _ := io.ReadAll(r.Body); strings.Contains(string(body), `"ping"`) {
				// The wrapper's probe before a replay.
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
				return
			}
			runs++
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "event: message\ndata: "+big+"\n\n")
			if end != "" {
				_, _ = io.WriteString(w, "event: message\ndata: "+end+"\n\n")
			}
		})
		h := mcphttp.New(store, mcphttp.Options{
			MaxRecordBytes:     1024,
			InTransactionTools: func(string) bool { return true },
			Observer: func(_ *http.Request, e idem.Event) {
				mu.Lock()
				kinds = append(kinds, e.Kind)
				mu.Unlock()
			},
			Engine: engine.Options{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))},
		})(inner)
		key := "spill-" + name
		first := httptest.NewRecorder()
		h.ServeHTTP(first, callRequest(key))
		if !strings.Contains(first.Body.String(), big) {
			t.Fatalf("%s: the client did not get the large answer: %.200s", name, first.Body.String())
		}
		retry := httptest.NewRecorder()
		h.ServeHTTP(retry, callRequest(key))
		mu.Lock()
		got, logged := slices.Clone(kinds), logs.String()
		mu.Unlock()
		if !strings.Contains(retry.Body.String(), fmt.Sprint(mcphttp.CodeUnreplayable)) || runs != 1 {
			t.Errorf("%s: the retry got %.200s after %d runs; want unreplayable, one run", name, retry.Body.String(), runs)
		}
		if slices.Contains(got, idem.EventReleased) || !slices.Contains(got, idem.EventCompleted) || strings.Contains(logged, "rolled back") {
			t.Errorf("%s: events %v, logs:\n%s\nwant the completion reported, no release, no rollback logged", name, got, logged)
		}
	}
}

// callRequest is a tools/call of "create" with _meta.idempotencyKey key,
// on session "s".
func callRequest(key string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(callBody(1, "create", nil, map[string]any{"idempotencyKey": key})))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", "s")
	return req
}

// lockedWriter serializes writes to w with mu.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
