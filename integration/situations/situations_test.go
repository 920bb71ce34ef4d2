// Package situations runs the engine's situations once for each adapter: a
// table of adapter × situation. Each adapter is mounted over a store in a
// real HTTP server around the same side effect (work), so that what the
// engine promises (lease loss by deadline, hang-ups, panics, shutdown) is
// checked in the same words for net/http and for MCP. It is in the
// integration module because it imports both adapters: middleware is in
// idem's root module, mcphttp in a module of its own (with the MCP SDK),
// and the root module's tests may import no other module of idem's.
package situations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testhttp"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// work is the protected side effect: it runs under the adapter's context
// and returns the text of its answer, or an error (answered as a failure,
// which releases the key).
type work func(ctx context.Context) (string, error)

// mountOptions are the settings a situation needs, in the adapters' common
// terms.
type mountOptions struct {
	lease        time.Duration
	storeTimeout time.Duration
	shutdown     context.Context
	observe      func(idem.Event)
}

// adapter is one of the engine's adapters, as the table sees it.
type adapter struct {
	name string
	// mount returns the adapter over store, around an inner handler that
	// runs w.
	mount func(store idem.Store, o mountOptions, w work) http.Handler
	// request is a protected request for key.
	request func(ctx context.Context, url, key string) *http.Request
	// answer reads a response: the work's text, and whether it was a
	// replay. ok is false for anything but the work's answer.
	answer func(t *testing.T, resp *http.Response) (text string, replayed, ok bool)
}

var adapters = []adapter{
	{
		name: middleware.AdapterName,
		mount: func(store idem.Store, o mountOptions, w work) http.Handler {
			opts := middleware.Options{Engine: engine.Options{Lease: o.lease, StoreTimeout: o.storeTimeout, Shutdown: o.shutdown}, Scope: func(*http.Request) string { return "tenant" }}
			if o.observe != nil {
				opts.Observer = func(_ *http.Request, e idem.Event) { o.observe(e) }
			}
			return middleware.New(store, opts)(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				text, err := w(r.Context())
				if err != nil {
					http.Error(rw, err.Error(), http.StatusServiceUnavailable)
					return
				}
				rw.Header().Set("Content-Type", "text/plain")
				rw.WriteHeader(http.StatusCreated)
				io.WriteString(rw, text)
			}))
		},
		request: func(ctx context.Context, url, key string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charge", strings.NewReader(`{"amount":1}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", `"`+key+`"`)
			return r
		},
		answer: func(t *testing.T, resp *http.Response) (string, bool, bool) {
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusCreated {
				return fmt.Sprintf("%d %s %v", resp.StatusCode, b, err), false, false
			}
			return string(b), resp.Header.Get("Idempotent-Replayed") == "true", true
		},
	},
	{
		name: mcphttp.AdapterName,
		mount: func(store idem.Store, o mountOptions, w work) http.Handler {
			opts := mcphttp.Options{Engine: engine.Options{Lease: o.lease, StoreTimeout: o.storeTimeout, Shutdown: o.shutdown}}
			if o.observe != nil {
				opts.Observer = func(_ *http.Request, e idem.Event) { o.observe(e) }
			}
			return mcphttp.New(store, opts)(fakeMCP(w))
		},
		request: func(ctx context.Context, url, key string) *http.Request {
			body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1},"_meta":{"idempotencyKey":"` + key + `"}}}`
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			return r
		},
		answer: func(t *testing.T, resp *http.Response) (string, bool, bool) {
			b, err := io.ReadAll(resp.Body)
			var msg struct {
				Result *struct {
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"result"`
			}
			if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &msg) != nil || msg.Result == nil || len(msg.Result.Content) != 1 {
				return fmt.Sprintf("%d %s %v", resp.StatusCode, b, err), false, false
			}
			return msg.Result.Content[0].Text, resp.Header.Get("Idempotent-Replayed") == "true", true
		},
	},
}

// fakeMCP is the smallest inner MCP handler: it answers tools/call with the
// work's text as a tool result (or a JSON-RPC error), and any other request
// (the wrapper's probe) with an empty result, as a JSON body.
func fakeMCP(w work) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		var b bytes.Buffer
		b.WriteString(`{"jsonrpc":"2.0","id":`)
		b.Write(req.ID)
		if req.Method != "tools/call" {
			b.WriteString(`,"result":{}}`)
			rw.Write(b.Bytes())
			return
		}
		// The tool runs on the call's work context: the wrapper keeps the
		// request's own a lease past a cut-off, to carry the answer.
		ctx, stop := mcphttp.WorkContext(r.Context())
		defer stop()
		text, err := w(ctx)
		if err != nil {
			msg, _ := json.Marshal(err.Error())
			fmt.Fprintf(&b, `,"error":{"code":-32000,"message":%s}}`, msg)
		} else {
			t, _ := json.Marshal(text)
			fmt.Fprintf(&b, `,"result":{"content":[{"type":"text","text":%s}]}}`, t)
		}
		rw.Write(b.Bytes())
	})
}

// env is one adapter mounted in a real server for one situation.
type env struct {
	t      *testing.T
	a      adapter
	store  idem.Store
	url    string
	runs   atomic.Int64
	events idemtest.Events
	// gone is closed when the server first sees a client hang up while
	// the adapter serves it.
	gone chan struct{}
}

// newEnv mounts a over store (nil: a fresh memstore) around w, counting
// each run of w.
func newEnv(t *testing.T, a adapter, store idem.Store, o mountOptions, w work) *env {
	t.Helper()
	e := &env{t: t, a: a, store: store, gone: make(chan struct{})}
	if e.store == nil {
		e.store = memstore.New(memstore.Options{})
	}
	o.observe = e.events.Observe
	srv := httptest.NewUnstartedServer(testhttp.HangUps(e.gone, a.mount(e.store, o, func(ctx context.Context) (string, error) {
		n := e.runs.Add(1)
		text, err := w(ctx)
		if err == nil && text == "" {
			text = fmt.Sprintf("run #%d", n)
		}
		return text, err
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics the situations cause
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	e.url = srv.URL
	return e
}

// client opens a connection per request: a connection the test's client
// hung up on is never reused.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// send sends the protected request for key and returns the answer.
func (e *env) send(ctx context.Context, key string) (text string, replayed, ok bool, err error) {
	resp, err := client.Do(e.a.request(ctx, e.url, key))
	if err != nil {
		return "", false, false, err
	}
	defer resp.Body.Close()
	text, replayed, ok = e.a.answer(e.t, resp)
	return text, replayed, ok, nil
}

// hangingRenew is a store whose Renew blocks until its context ends: a
// partitioned database or an exhausted pool.
type hangingRenew struct{ idem.Store }

func (hangingRenew) Renew(ctx context.Context, _ idem.Token, _ time.Duration) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

func TestSituations(t *testing.T) {
	t.Parallel()
	situations := []struct {
		name string
		run  func(t *testing.T, a adapter)
	}{
		{"renewal hangs: the work's context ends within the lease", situationRenewHangs},
		{"client hangs up: the work runs to completion and the retry replays it", situationClientHangsUp},
		{"work panics: the key is released and the retry runs again", situationPanic},
		{"renewal finds the claim taken over: the work's context ends at once", situationTakenOver},
		{"server shuts down: the work's context ends, the key is released", situationShutdown},
		{"server shuts down as the work finishes: its whole answer is recorded, the retry replays it", situationShutdownFinished},
		{"lease lost as the work finishes: its whole answer is recorded, the retry replays it", situationLeaseLostFinished},
		{"events: every event names the adapter; a wait and a takeover are reported", situationEvents},
		{"completion fails for a moment (a failover): it is retried, and the retry replays the first run", situationCompleteFailsForAMoment},
	}
	for _, a := range adapters {
		for _, s := range situations {
			t.Run(a.name+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				s.run(t, a)
			})
		}
	}
}

// situationRenewHangs: with a 1 s lease and a 10 s store timeout, a renewal
// that hangs must not let the work run past the lease, when another
// instance may take the key over.
func situationRenewHangs(t *testing.T, a adapter) {
	const lease = time.Second
	type ended struct {
		after time.Duration
		cause error
	}
	got := make(chan ended, 1)
	e := newEnv(t, a, hangingRenew{memstore.New(memstore.Options{})}, mountOptions{lease: lease, storeTimeout: 10 * time.Second},
		func(ctx context.Context) (string, error) {
			start := time.Now()
			select {
			case <-ctx.Done():
				got <- ended{time.Since(start), context.Cause(ctx)}
				return "", context.Cause(ctx)
			case <-time.After(4 * lease):
				got <- ended{time.Since(start), nil}
				return "finished on a lost lease", nil
			}
		})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.send(context.Background(), "renew-hangs")
	}()
	end := <-got
	<-done
	if end.cause == nil || end.after > lease {
		t.Fatalf("the work's context ended after %v with cause %v; want it ended within the lease (%v) with ErrLeaseLost", end.after, end.cause, lease)
	}
	if !errors.Is(end.cause, idem.ErrLeaseLost) {
		t.Fatalf("cause = %v, want idem.ErrLeaseLost", end.cause)
	}
	if n := e.events.Count(idem.EventCompleted); n != 0 {
		t.Fatalf("events %v: the work of a lost lease was recorded", e.events.Kinds())
	}
	if e.events.Count(idem.EventLeaseLost) != 1 {
		t.Fatalf("events %v, want one lease lost", e.events.Kinds())
	}
}

// situationClientHangsUp: the client leaves while the work runs; the work
// still completes (its context does not end), its answer is recorded, and
// the client's retry gets it without a second run.
func situationClientHangsUp(t *testing.T, a adapter) {
	started := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	e := newEnv(t, a, nil, mountOptions{}, func(ctx context.Context) (string, error) {
		once.Do(func() { close(started) })
		<-proceed
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("the work's context ended with the client: %w", context.Cause(ctx))
		}
		return "", nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	sent := make(chan error, 1)
	go func() {
		_, _, _, err := e.send(ctx, "hang-up")
		sent <- err
	}()
	<-started
	cancel()
	if err := <-sent; err == nil {
		t.Fatal("the client that hung up got an answer")
	}
	select { // the server notices the hang-up
	case <-e.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not see the client hang up")
	}
	close(proceed)

	text, replayed, ok := retryAfterEnd(t, e, e, "hang-up")
	if !ok || !replayed || e.runs.Load() != 1 {
		t.Fatalf("retry got %q (replayed %v); work ran %d times; events %v; want one run, replayed", text, replayed, e.runs.Load(), e.events.Kinds())
	}
	if text != "run #1" {
		t.Fatalf("retry got %q, want the first run's answer", text)
	}
}

// retryAfterEnd waits, for at most 5 s, until first (where the original
// request of key ran) reports the original completed or released (it may
// still be finishing after its client got an answer or left), then sends
// key to e once.
func retryAfterEnd(t *testing.T, first, e *env, key string) (string, bool, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := first.events.WaitAny(ctx, idem.EventCompleted, idem.EventReleased); err != nil {
		t.Fatalf("the original request of %q did not end: %v (events %v)", key, err, first.events.Kinds())
	}
	text, replayed, ok, err := e.send(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return text, replayed, ok
}

// situationPanic: a work that panics recorded nothing; the key is released
// and the retry runs it again.
func situationPanic(t *testing.T, a adapter) {
	var first atomic.Bool
	first.Store(true)
	e := newEnv(t, a, nil, mountOptions{}, func(ctx context.Context) (string, error) {
		if first.Swap(false) {
			panic("boom")
		}
		return "", nil
	})
	if _, _, ok, _ := e.send(t.Context(), "panics"); ok {
		t.Fatal("a panicking work answered")
	}
	text, replayed, ok, err := e.send(t.Context(), "panics")
	if err != nil || !ok || replayed || e.runs.Load() != 2 {
		t.Fatalf("retry got %q replayed=%v ok=%v err=%v after %d runs; want a fresh run", text, replayed, ok, err, e.runs.Load())
	}
	if e.events.Count(idem.EventReleased) != 1 {
		t.Fatalf("events %v, want one release", e.events.Kinds())
	}
}

// staleRenew is a store whose every Renew finds the claim taken over.
type staleRenew struct{ idem.Store }

func (staleRenew) Renew(_ context.Context, tok idem.Token, _ time.Duration) (time.Time, error) {
	return time.Time{}, &idem.StaleClaimError{Token: tok, Current: tok.Generation + 1}
}

// situationTakenOver: the first renewal finds a newer generation: the
// work's context ends then, long before the lease, and nothing is recorded.
func situationTakenOver(t *testing.T, a adapter) {
	const lease = 3 * time.Second
	cause := make(chan error, 1)
	start := time.Now()
	e := newEnv(t, a, staleRenew{memstore.New(memstore.Options{})}, mountOptions{lease: lease},
		func(ctx context.Context) (string, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return "too late", nil
		})
	if _, _, _, err := e.send(t.Context(), "taken-over"); err != nil {
		t.Fatal(err)
	}
	if err := <-cause; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("cause = %v, want idem.ErrLeaseLost", err)
	}
	if took := time.Since(start); took > lease/2 {
		t.Fatalf("the work ended after %v; the first renewal (at %v) found the claim stale", took, lease/3)
	}
	if e.events.Count(idem.EventLeaseLost) != 1 || e.events.Count(idem.EventCompleted) != 0 || e.events.Count(idem.EventReleased) != 0 {
		t.Fatalf("events %v, want one lease lost, no completion and no release (the key is the new owner's)", e.events.Kinds())
	}
}

// situationShutdown: Options.Engine.Shutdown ends running work with
// engine.ErrShutdown; the work is not recorded, its key is released, and
// the retry (on another instance, here the same store) runs it again.
func situationShutdown(t *testing.T, a adapter) {
	shutdown, stop := context.WithCancel(context.Background())
	defer stop()
	store := memstore.New(memstore.Options{})
	started := make(chan struct{})
	cause := make(chan error, 1)
	var once sync.Once
	e := newEnv(t, a, store, mountOptions{shutdown: shutdown}, func(ctx context.Context) (string, error) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return "", nil
		}
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return "", context.Cause(ctx) // it honours its context: a failure
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.send(context.Background(), "shutdown")
	}()
	<-started
	stop()
	if err := <-cause; !errors.Is(err, engine.ErrShutdown) {
		t.Fatalf("cause = %v, want engine.ErrShutdown", err)
	}
	<-done
	if e.events.Count(idem.EventReleased) != 1 || e.events.Count(idem.EventCompleted) != 0 {
		t.Fatalf("events %v, want one release and no completion", e.events.Kinds())
	}
	if text, _, ok, _ := e.send(t.Context(), "after-shutdown"); ok || e.runs.Load() != 1 {
		t.Fatalf("a request after the shutdown ran (%q, %d runs); want it refused", text, e.runs.Load())
	}
	other := newEnv(t, a, store, mountOptions{}, func(context.Context) (string, error) { return "", nil })
	text, replayed, ok, err := other.send(t.Context(), "shutdown")
	if err != nil || !ok || replayed || text != "run #1" {
		t.Fatalf("retry on another instance got %q replayed=%v ok=%v err=%v; want a fresh run", text, replayed, ok, err)
	}
}

// situationShutdownFinished: Shutdown fires while the work makes its charge,
// which it finishes anyway (it does not look at its context) and answers
// whole: the charge happened, so its answer is recorded, and the retry on
// another instance replays it instead of charging again.
func situationShutdownFinished(t *testing.T, a adapter) {
	shutdown, stop := context.WithCancel(context.Background())
	defer stop()
	store := memstore.New(memstore.Options{})
	var charges atomic.Int64
	charge := func(context.Context) (string, error) {
		return fmt.Sprintf(`{"charge":%d}`, charges.Add(1)), nil
	}
	e := newEnv(t, a, store, mountOptions{shutdown: shutdown}, func(ctx context.Context) (string, error) {
		stop()
		<-ctx.Done() // the shutdown reached the work before it answered
		return charge(ctx)
	})
	if text, _, ok, err := e.send(t.Context(), "shutdown-finished"); err != nil || !ok || text != `{"charge":1}` {
		t.Fatalf("first request got %q ok=%v err=%v, want the first charge", text, ok, err)
	}
	other := newEnv(t, a, store, mountOptions{}, charge)
	text, replayed, ok := retryAfterEnd(t, e, other, "shutdown-finished")
	if !ok || !replayed || text != `{"charge":1}` || charges.Load() != 1 {
		t.Fatalf("retry on another instance got %q (replayed %v, ok %v) after %d charges; events %v; want the first charge replayed",
			text, replayed, ok, charges.Load(), e.events.Kinds())
	}
	if e.events.Count(idem.EventCompleted) != 1 || e.events.Count(idem.EventReleased) != 0 {
		t.Fatalf("events %v, want one completion and no release", e.events.Kinds())
	}
}

// situationLeaseLostFinished: the renewals hang until the lease is lost,
// but the work was making its charge and finishes it, answering whole.
// Nobody took the key over, so the completion, fenced by the generation,
// records it, and the retry replays it instead of charging again.
func situationLeaseLostFinished(t *testing.T, a adapter) {
	var charges atomic.Int64
	e := newEnv(t, a, hangingRenew{memstore.New(memstore.Options{})}, mountOptions{lease: time.Second},
		func(ctx context.Context) (string, error) {
			<-ctx.Done() // lost: the renewal hung until the lease deadline
			return fmt.Sprintf(`{"charge":%d}`, charges.Add(1)), nil
		})
	if text, _, ok, err := e.send(t.Context(), "lost-finished"); err != nil || !ok || text != `{"charge":1}` {
		t.Fatalf("first request got %q ok=%v err=%v, want the first charge", text, ok, err)
	}
	text, replayed, ok := retryAfterEnd(t, e, e, "lost-finished")
	if !ok || !replayed || text != `{"charge":1}` || charges.Load() != 1 {
		t.Fatalf("retry got %q (replayed %v, ok %v) after %d charges; events %v; want the first charge replayed",
			text, replayed, ok, charges.Load(), e.events.Kinds())
	}
	if e.events.Count(idem.EventLeaseLost) != 1 || e.events.Count(idem.EventCompleted) != 1 {
		t.Fatalf("events %v, want one lease lost and one completion", e.events.Kinds())
	}
}

// abandonOnce is a store whose first claim is handed out with a lease
// that has already run out, as if its owner had crashed: the next claim of
// the key takes it over.
type abandonOnce struct {
	idem.Store
	once sync.Once
	// waiting receives (if it can) when a duplicate starts waiting for
	// the key's holder.
	waiting chan struct{}
}

func (s *abandonOnce) Wait(ctx context.Context, scope string, key idem.Key) error {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	return s.Store.Wait(ctx, scope, key)
}

func (s *abandonOnce) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	abandon := false
	s.once.Do(func() { abandon = true })
	if abandon {
		req.Lease = time.Millisecond
	}
	return s.Store.Claim(ctx, req)
}

// situationEvents: the events of a takeover, a duplicate that waited, and
// its replay each name the adapter, and carry Takeover and Waited.
func situationEvents(t *testing.T, a adapter) {
	store := &abandonOnce{Store: memstore.New(memstore.Options{}), waiting: make(chan struct{}, 1)}
	proceed := make(chan struct{})
	entered := make(chan struct{}, 2)
	e := newEnv(t, a, store, mountOptions{}, func(ctx context.Context) (string, error) {
		entered <- struct{}{}
		<-proceed
		return "", nil
	})
	// The first request claims with the abandoned lease and is left
	// running; the second takes the key over once that lease is gone.
	results := make(chan bool, 3)
	go func() {
		_, _, ok, _ := e.send(context.Background(), "events")
		results <- ok
	}()
	<-entered
	// A real duration: the abandoned 1 ms lease runs out on memstore's
	// wall clock, which the store measures.
	time.Sleep(20 * time.Millisecond)
	go func() {
		_, _, ok, _ := e.send(context.Background(), "events")
		results <- ok
	}()
	<-entered
	// A third waits for the second's result.
	go func() {
		_, replayed, ok, _ := e.send(context.Background(), "events")
		results <- ok && replayed
	}()
	select {
	case <-store.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the third request did not wait for the second")
	}
	close(proceed)
	for range 3 {
		<-results
	}
	var takeover, waited bool
	all := e.events.All()
	for _, ev := range all {
		if ev.Adapter != a.name {
			t.Errorf("event %v names adapter %q, want %q", ev.Kind, ev.Adapter, a.name)
		}
		if ev.Kind == idem.EventClaimed && ev.Takeover {
			takeover = true
		}
		if ev.Kind == idem.EventReplayed && ev.Waited > 0 {
			waited = true
		}
	}
	if !takeover || !waited {
		t.Errorf("events %+v: want a claim with Takeover and a replay with Waited", all)
	}
}

// situationCompleteFailsForAMoment: the work ran and answered, and its
// completion fails for 300 ms (the store fails over), well within the 2 s
// lease. The claim is still the work's, so the completion is retried and
// the key completes: the client's retry replays the answer it got, and the
// work ran once. Without the retry the claim stays until its lease runs
// out, and the retry runs the work a second time (an effect outside the
// database happens twice: it answered "run #2" before the engine retried).
func situationCompleteFailsForAMoment(t *testing.T, a adapter) {
	const lease = 2 * time.Second
	store := &teststore.CompleteFailsUntil{Store: memstore.New(memstore.Options{})}
	e := newEnv(t, a, store, mountOptions{lease: lease}, func(context.Context) (string, error) {
		store.Up = time.Now().Add(300 * time.Millisecond)
		return "", nil
	})
	first, _, ok, err := e.send(t.Context(), "complete-fails")
	if err != nil || !ok {
		t.Fatalf("first request: %q ok=%v err=%v", first, ok, err)
	}
	// The retried completion is reported when it succeeds; without the
	// retry there is none until the lease runs out and a retry runs again.
	ctx, cancel := context.WithTimeout(t.Context(), 3*lease)
	defer cancel()
	if err := e.events.Wait(ctx, idem.EventCompleted, 1); err != nil {
		t.Fatalf("no completion within %v: %v; %d completion attempts, events %v", 3*lease, err, store.Attempts.Load(), e.events.Kinds())
	}
	text, replayed, ok, err := e.send(t.Context(), "complete-fails")
	if err != nil {
		t.Fatal(err)
	}
	if !ok || !replayed || text != first || e.runs.Load() != 1 {
		t.Fatalf("retry got %q (replayed %v, ok %v) after %d runs; the client was answered %q: want it replayed, one run (%d completion attempts, events %v)",
			text, replayed, ok, e.runs.Load(), first, store.Attempts.Load(), e.events.Kinds())
	}
	if e.events.Count(idem.EventCompleted) != 1 {
		t.Fatalf("events %v, want one completion", e.events.Kinds())
	}
}
