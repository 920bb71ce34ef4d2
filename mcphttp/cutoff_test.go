package mcphttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// The tests in this file cut a call off while its tool runs, the three ways
// the engine does (Options.Engine.Shutdown, a lost lease, Options.Engine.MaxExecution),
// on go-sdk's server as it is deployed behind the wrapper: stateful, and
// stateless (2026-07-28) with SSE or JSON responses.

// cutOffMode is one way go-sdk's server is set up behind the wrapper.
type cutOffMode struct {
	name string
	v    version
	http mcp.StreamableHTTPOptions
	wrap mcphttp.Options
	// toolCancellation adds mcphttp.ToolCancellation to the server.
	toolCancellation bool
}

var cutOffModes = []cutOffMode{
	{name: "stateful", v: versions[1]},
	// As the package doc recommends for a stateless go-sdk server.
	{name: "stateless", v: versions[0], http: mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}},
	// As integration/robustness deploys it.
	{name: "stateless-json", v: versions[0], http: mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}, wrap: mcphttp.Options{Stateless: true}},
	// With the middleware that cancels the tool at the cut-off.
	{name: "stateless-toolcancellation", v: versions[0], http: mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true},
		wrap: mcphttp.Options{Stateless: true}, toolCancellation: true},
}

// cutOff is one way the engine ends a call's work while its tool runs.
type cutOff struct {
	name string
	// setup sets the options and store that let the test cut the call
	// off; happen cuts it off once the tool has entered, and returns once
	// the call's work context has ended (cut is closed when it does).
	setup  func(o *mcphttp.Options, store idem.Store) idem.Store
	happen func(t *testing.T, cut <-chan struct{})
}

// waitCut waits for a call's work context to end, failing t after 10 s.
func waitCut(t *testing.T, cut <-chan struct{}) {
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the call's work was not cut off")
	}
}

// watchCut wraps the inner handler with what tells a test a call was cut
// off: for a request the wrapper runs a call on, the call's
// mcphttp.WorkContext; cut is closed the first time one ends while the
// inner handler runs.
func watchCut(cut chan struct{}, inner http.Handler) http.Handler {
	closeCut := sync.OnceFunc(func() { close(cut) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		work, stop := mcphttp.WorkContext(r.Context())
		defer stop()
		if work != r.Context() {
			stopWatch := context.AfterFunc(work, closeCut)
			defer stopWatch()
		}
		inner.ServeHTTP(w, r)
	})
}

// cutOffs returns the three cut-offs, each with its own trigger.
func cutOffs() []func() cutOff {
	return []func() cutOff{
		func() cutOff {
			ctx, cancel := context.WithCancel(context.Background())
			return cutOff{name: "shutdown",
				setup: func(o *mcphttp.Options, s idem.Store) idem.Store { o.Engine.Shutdown = ctx; return s },
				happen: func(t *testing.T, cut <-chan struct{}) {
					cancel()
					waitCut(t, cut) // the engine cancels the work from an AfterFunc
				}}
		},
		func() cutOff {
			lost := make(chan struct{})
			var once sync.Once
			return cutOff{name: "lease-lost",
				setup: func(o *mcphttp.Options, s idem.Store) idem.Store {
					o.Engine.Lease = leaseLostLease
					o.Observer = func(_ *http.Request, e idem.Event) {
						if e.Kind == idem.EventLeaseLost {
							once.Do(func() { close(lost) })
						}
					}
					return hangingRenew{s}
				},
				happen: func(t *testing.T, _ <-chan struct{}) {
					select {
					case <-lost:
					case <-time.After(5 * leaseLostLease):
						t.Fatal("the lease was not lost")
					}
				}}
		},
		func() cutOff {
			return cutOff{name: "deadline",
				setup: func(o *mcphttp.Options, s idem.Store) idem.Store {
					o.Engine.MaxExecution, o.Engine.Lease = 100*time.Millisecond, 3*time.Second
					return s
				},
				happen: waitCut}
		},
	}
}

// cutOffServer is go-sdk's server in a mode, behind two wrappers on one
// store: cut, whose options cut calls off, and plain (another instance of
// the service), where a retry goes.
type cutOffServer struct {
	runs *runs
	// entered receives as a tool starts; proceed lets the "effect" tool
	// answer; release ends the "stuck" tool (at the end of the test).
	entered chan struct{}
	// workCut is closed once a call's work on cut was cut off.
	workCut          chan struct{}
	proceed, release chan struct{}
	// cut and plain are clients of the two wrappers (for the stateful
	// server, on a session each).
	cut, plain *raw
}

func newCutOffServer(t *testing.T, mode cutOffMode, c cutOff) *cutOffServer {
	t.Helper()
	s := &cutOffServer{runs: &runs{}, entered: make(chan struct{}, 4), workCut: make(chan struct{}), proceed: make(chan struct{}), release: make(chan struct{})}
	server := mcp.NewServer(&mcp.Implementation{Name: "cut-off", Version: "1"}, nil)
	if mode.toolCancellation {
		server.AddReceivingMiddleware(mcphttp.ToolCancellation)
	}
	// effect does its side effect, then answers once the test lets it,
	// whatever its context says: the effect happened, and its answer is
	// the call's.
	mcp.AddTool(server, &mcp.Tool{Name: "effect"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		n := s.runs.add("effect")
		s.entered <- struct{}{}
		<-s.proceed
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("effect #%d", n)}}}, nil, nil
	})
	// stuck never finishes while the test runs. On a stateless server it
	// honours its context: if the context ends, it stops, a moment later,
	// and returns the context's error (which go-sdk, having ended the
	// call's stream with the context, drops).
	mcp.AddTool(server, &mcp.Tool{Name: "stuck"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		s.runs.add("stuck")
		s.entered <- struct{}{}
		select {
		case <-ctx.Done():
			if mode.v.stateless {
				time.Sleep(50 * time.Millisecond)
				return nil, nil, ctx.Err()
			}
			<-s.release // a stateful tool that ignores it
		case <-s.release:
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "stuck"}}}, nil, nil
	})
	httpOpts := mode.http
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &httpOpts)
	store := idem.Store(memstore.New(memstore.Options{}))
	wrap := mode.wrap
	wrap.Engine.Wait = -1
	cutStore := c.setup(&wrap, store)
	plain := mode.wrap
	plain.Engine.Wait = -1
	cutSrv := httptest.NewServer(mcphttp.New(cutStore, wrap)(watchCut(s.workCut, inner)))
	plainSrv := httptest.NewServer(mcphttp.New(store, plain)(inner))
	t.Cleanup(func() {
		cutSrv.CloseClientConnections()
		cutSrv.Close()
		plainSrv.CloseClientConnections()
		plainSrv.Close()
	})
	vh := &vharness{v: mode.v}
	s.cut, s.plain = vh.raw(t, cutSrv.URL), vh.raw(t, plainSrv.URL)
	// Registered last, so run first: the sessions' DELETEs wait for
	// their tools.
	t.Cleanup(func() {
		close(s.release)
		select {
		case <-s.proceed:
		default:
			close(s.proceed)
		}
	})
	return s
}

// startCall sends a keyed tools/call of tool to url in the background and
// returns the channel its HTTP response arrives on.
func startCall(t *testing.T, r *raw, id int, tool, key string) <-chan *http.Response {
	t.Helper()
	req := r.request(r.body(id, "tools/call", map[string]any{"name": tool, "_meta": map[string]any{"idempotencyKey": key}}), nil)
	if r.v.stateless {
		req.Header.Set("Mcp-Name", tool)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("tools/call: %v", err)
			resp = nil
		}
		answered <- resp
	}()
	return answered
}

// responseTo returns the JSON-RPC responses (not notifications) of an HTTP
// response.
func responsesOf(t *testing.T, resp *http.Response) []rpcMessage {
	t.Helper()
	if resp == nil {
		t.FailNow()
	}
	var out []rpcMessage
	for _, m := range readMessages(t, resp) {
		if m.Method == "" {
			out = append(out, m)
		}
	}
	return out
}

// TestCutOffAnswerRecorded: a tool does its effect, the engine cuts the call
// off (shutdown, lease lost, deadline), and the tool, which had done its
// effect, answers after all. Its answer is the call's: the client gets it,
// it is recorded, and the retry (on another instance) replays it; the
// effect happened once. Before, go-sdk dropped the answer of a call whose
// request context the wrapper had ended: the client got HTTP 200 without a
// JSON-RPC response, the wrapper released the key, and the retry ran the
// tool again.
func TestCutOffAnswerRecorded(t *testing.T) {
	t.Parallel()
	for _, mode := range cutOffModes {
		for _, newCut := range cutOffs() {
			c := newCut()
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				s := newCutOffServer(t, mode, c)
				key := "cut-" + mode.name + "-" + c.name
				answered := startCall(t, s.cut, 1, "effect", key)
				<-s.entered
				c.happen(t, s.workCut)
				close(s.proceed)
				first := responsesOf(t, <-answered)
				if len(first) != 1 || first[0].text() != "effect #1" {
					t.Errorf("the cut-off call was answered %+v; want the tool's answer, effect #1", first)
				}
				resp := startCall(t, s.plain, 2, "effect", key)
				retry := responsesOf(t, <-resp)
				if len(retry) != 1 || retry[0].text() != "effect #1" || !retry[0].replayed() {
					t.Errorf("the retry got %+v; want effect #1 replayed", retry)
				}
				if n := s.runs.get("effect"); n != 1 {
					t.Errorf("the effect happened %d times, want once", n)
				}
			})
		}
	}
}

// TestCutOffWithoutAnswerIsRetryable: the engine cuts a call off and its
// tool does not answer (stateful: it ignores the cancellation and runs on;
// stateless: its cancellation leaves go-sdk nothing to send). A lease
// later the client is told, in a JSON-RPC error it can act on, that the
// call may still be running and to retry it later with the same key. The
// claim is left to its lease: a retry while it lasts (after Shutdown, the
// claim was renewed until then) is told the call is in flight, and does
// not run the tool beside the one still running. Before, the client got
// HTTP 200 with no JSON-RPC response at all, and the key was released.
func TestCutOffWithoutAnswerIsRetryable(t *testing.T) {
	t.Parallel()
	// Not stateless-json: without PropagateRequestCancellation nothing
	// cancels a stateless go-sdk tool but its own context, and a tool that
	// never returns keeps its request, as it keeps go-sdk's own.
	for _, mode := range cutOffModes[:2] {
		for _, newCut := range cutOffs() {
			c := newCut()
			if c.name == "lease-lost" {
				continue // the same as the deadline, but a lease later
			}
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				setup := c.setup
				c.setup = func(o *mcphttp.Options, s idem.Store) idem.Store {
					s = setup(o, s)
					o.Engine.Lease = leaseLostLease
					return s
				}
				s := newCutOffServer(t, mode, c)
				key := "stuck-" + mode.name + "-" + c.name
				answered := startCall(t, s.cut, 1, "stuck", key)
				<-s.entered
				c.happen(t, s.workCut)
				var resp *http.Response
				select {
				case resp = <-answered:
				case <-time.After(10 * leaseLostLease):
					t.Fatal("the cut-off call was not answered")
				}
				if resp == nil {
					t.FailNow()
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("HTTP %d, want 200 (with a JSON-RPC error)", resp.StatusCode)
				}
				got := responsesOf(t, resp)
				if len(got) != 1 || got[0].Error == nil {
					t.Fatalf("the cut-off call was answered %+v; want one JSON-RPC error", got)
				}
				var e struct {
					Error struct {
						Code int `json:"code"`
						Data struct {
							Reason       string `json:"reason"`
							Type         string `json:"type"`
							RetryAfterMs int64  `json:"retryAfterMs"`
						} `json:"data"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(got[0].raw), &e); err != nil {
					t.Fatal(err)
				}
				if e.Error.Code != mcphttp.CodeInFlight || e.Error.Data.Type != mcphttp.TypeInProgress ||
					e.Error.Data.Reason != mcphttp.ReasonCutOff || e.Error.Data.RetryAfterMs <= 0 {
					t.Errorf("the cut-off call was answered %s; want code %d, data.type %s, data.reason %s, data.retryAfterMs",
						got[0].raw, mcphttp.CodeInFlight, mcphttp.TypeInProgress, mcphttp.ReasonCutOff)
				}
				if c.name != "shutdown" {
					// Past its deadline the claim was not renewed, and ran
					// out as the client was told: a retry takes it over.
					return
				}
				retry := responsesOf(t, <-startCall(t, s.plain, 2, "stuck", key))
				if len(retry) != 1 || retry[0].Error == nil || retry[0].Error.Code != mcphttp.CodeInFlight {
					t.Errorf("the retry got %+v; want the call in flight (its claim left to its lease)", retry)
				}
				if n := s.runs.get("stuck"); n != 1 {
					t.Errorf("the tool ran %d times, want once", n)
				}
			})
		}
	}
}
