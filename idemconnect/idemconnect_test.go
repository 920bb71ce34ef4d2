package idemconnect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemproto"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/doortest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/pgstore"
)

const chargeProcedure = "/test.Ledger/Charge"

// ledger is the procedure under test: the customer in, the charge's id
// out. "unknown" is NotFound (recorded), "flaky" Unavailable (not).
type ledger struct {
	pool  *pgxpool.Pool
	runs  atomic.Int64
	proto atomic.Value // the HTTP version of the last request served
	enter chan struct{}
	gate  chan struct{}
}

func (l *ledger) charge(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
	n := l.runs.Add(1)
	if l.enter != nil {
		l.enter <- struct{}{}
		<-l.gate
	}
	switch req.Msg.GetValue() {
	case "unknown":
		cerr := connect.NewError(connect.CodeNotFound, errors.New("no such customer"))
		if d, err := connect.NewErrorDetail(&errdetails.ResourceInfo{ResourceName: "unknown"}); err == nil {
			cerr.AddDetail(d)
		}
		return nil, cerr
	case "flaky":
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the bank is down"))
	}
	if l.pool == nil {
		return connect.NewResponse(wrapperspb.Int64(n)), nil
	}
	var id int64
	if err := pgstore.TxFrom(ctx).QueryRow(ctx, `INSERT INTO charges (customer) VALUES ($1) RETURNING id`, req.Msg.GetValue()).Scan(&id); err != nil {
		return nil, err
	}
	return connect.NewResponse(wrapperspb.Int64(id)), nil
}

func principal(_ context.Context, req connect.AnyRequest) string { return req.Header().Get("User") }

// server serves the procedure with the interceptor: over HTTP/1.1, or
// HTTP/2 without TLS (h2c).
func server(t *testing.T, store idem.Store, l *ledger, opts idemconnect.Options, h2c bool) (url string, client *http.Client) {
	t.Helper()
	if opts.Principal == nil {
		opts.Principal = principal
	}
	mux := http.NewServeMux()
	mux.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure, l.charge, connect.WithInterceptors(idemconnect.NewInterceptor(store, opts))))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.proto.Store(r.Proto)
		mux.ServeHTTP(w, r)
	}))
	client = &http.Client{}
	if h2c {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		client.Transport = tr
		t.Cleanup(tr.CloseIdleConnections)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, client
}

type answer struct {
	id       int64
	err      *connect.Error
	replayed bool
}

func charge(ctx context.Context, c *connect.Client[wrapperspb.StringValue, wrapperspb.Int64Value], user, key, customer string) answer {
	req := connect.NewRequest(wrapperspb.String(customer))
	req.Header().Set("User", user)
	if key != "" {
		req.Header().Set(idemproto.KeyHeader, key)
	}
	resp, err := c.CallUnary(ctx, req)
	if err != nil {
		var cerr *connect.Error
		if !errors.As(err, &cerr) {
			cerr = connect.NewError(connect.CodeUnknown, err)
		}
		return answer{err: cerr, replayed: cerr.Meta().Get(idemproto.ReplayedHeader) == "true"}
	}
	return answer{id: resp.Msg.GetValue(), replayed: resp.Header().Get(idemproto.ReplayedHeader) == "true"}
}

func code(a answer) connect.Code {
	if a.err == nil {
		return 0
	}
	return a.err.Code()
}

// TestProtocols: on HTTP/1.1 and HTTP/2, with the Connect protocol (proto
// and JSON), gRPC (HTTP/2 only) and gRPC-Web, a retry gets the first
// call's message or recorded error, marked replayed, and the handler runs
// once; an Unavailable runs again; in flight is Aborted with a RetryInfo;
// the key with another message is FailedPrecondition.
func TestProtocols(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h2c  bool
		opts []connect.ClientOption
	}{
		{"connect HTTP/1.1", false, nil},
		{"connect JSON HTTP/1.1", false, []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpc-web HTTP/1.1", false, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"connect HTTP/2", true, nil},
		{"grpc HTTP/2", true, []connect.ClientOption{connect.WithGRPC()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &ledger{}
			url, hc := server(t, memstore.New(memstore.Options{}), l, idemconnect.Options{}, tc.h2c)
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure, tc.opts...)
			ctx := t.Context()

			first, second := charge(ctx, c, "ada", "k1", "acme"), charge(ctx, c, "ada", "k1", "acme")
			if first.err != nil || first.replayed || second.err != nil || !second.replayed || second.id != first.id {
				t.Fatalf("first %+v, second %+v: want one id, the second replayed", first, second)
			}
			if wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[tc.h2c]; l.proto.Load() != wantProto {
				t.Errorf("served over %s, want %s", l.proto.Load(), wantProto)
			}
			nf1, nf2 := charge(ctx, c, "ada", "k2", "unknown"), charge(ctx, c, "ada", "k2", "unknown")
			if code(nf1) != connect.CodeNotFound || code(nf2) != connect.CodeNotFound || !nf2.replayed ||
				nf2.err.Message() != nf1.err.Message() || len(nf2.err.Details()) != 1 {
				t.Errorf("a NotFound retried: %v (replayed %v), want %v replayed with its detail", nf2.err, nf2.replayed, nf1.err)
			}
			f1, f2 := charge(ctx, c, "ada", "k3", "flaky"), charge(ctx, c, "ada", "k3", "flaky")
			if code(f1) != connect.CodeUnavailable || f2.replayed {
				t.Errorf("an Unavailable retried: %v %v, want it run again", f1.err, f2.replayed)
			}
			if n := l.runs.Load(); n != 4 {
				t.Errorf("the handler ran %d times, want 4", n)
			}
			if a := charge(ctx, c, "ada", "k1", "globex"); code(a) != connect.CodeFailedPrecondition {
				t.Errorf("the key with another message: %v, want FailedPrecondition", a.err)
			}

			l.enter, l.gate = make(chan struct{}), make(chan struct{})
			done := make(chan answer)
			go func() { done <- charge(ctx, c, "ada", "busy", "acme") }()
			<-l.enter
			inFlight := charge(ctx, c, "ada", "busy", "acme")
			close(l.gate)
			<-done
			var retry *errdetails.RetryInfo
			if inFlight.err != nil {
				for _, d := range inFlight.err.Details() {
					if v, err := d.Value(); err == nil {
						retry, _ = v.(*errdetails.RetryInfo)
					}
				}
			}
			if code(inFlight) != connect.CodeAborted || retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
				t.Errorf("in flight: %v, want Aborted with a RetryInfo", inFlight.err)
			}
		})
	}
}

// TestInTransaction: over HTTP/2, the handler's row and the recorded answer
// commit together; a retry replays it and the row is there once; a call
// without a key passes through, or is InvalidArgument with RequireKey.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	store := teststore.Migrated(t, pool, pgstore.Options{}, `CREATE TABLE charges (id bigserial PRIMARY KEY, customer text NOT NULL)`)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := &ledger{pool: pool}
	url, hc := server(t, store, l, idemconnect.Options{InTransaction: true, RequireKey: true}, true)
	c := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure)
	first, second := charge(ctx, c, "ada", "k1", "acme"), charge(ctx, c, "ada", "k1", "acme")
	if first.err != nil || first.id == 0 || second.id != first.id || !second.replayed {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	if a := charge(ctx, c, "ada", "", "acme"); code(a) != connect.CodeInvalidArgument {
		t.Errorf("no key with RequireKey: %v", a.err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d charges (%v), want 1", n, err)
	}
}

// TestRefusalsAndLabelsReported: the interceptor reports a call it refuses
// before a claim, and one it runs without a key, as the HTTP adapters
// do, by reason; a claim stores the procedure and the principal as labels.
func TestRefusalsAndLabelsReported(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	var events idemtest.Events
	ctx := t.Context()
	url, hc := server(t, store, &ledger{}, idemconnect.Options{Observe: events.Observe}, false)
	loose := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure)
	charge(ctx, loose, "ada", "", "acme")
	charge(ctx, loose, "ada", strings.Repeat("k", idem.MaxHeaderKeyLen+1), "acme")
	url, hc = server(t, store, &ledger{}, idemconnect.Options{RequireKey: true, Observe: events.Observe}, false)
	charge(ctx, connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure), "ada", "", "acme")
	doortest.WantRefusals(t, events.All(), idemconnect.AdapterName)

	if a := charge(ctx, loose, "ada", "labelled", "acme"); a.err != nil {
		t.Fatal(a.err)
	}
	doortest.WantLabels(t, store, chargeProcedure)
}
