package idemconnect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
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
// out. "unknown" is NotFound (recorded), "flaky" Unavailable (not). Every
// answer carries metadata of the run: on success the header X-Ledger-Id,
// X-Seq-Bin (binary) and X-Debug, and the trailer X-Ledger-Total and
// X-Trace; on an error, X-Ledger-Id and X-Debug in its metadata.
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
	run := strconv.FormatInt(n, 10)
	switch req.Msg.GetValue() {
	case "unknown":
		cerr := connect.NewError(connect.CodeNotFound, errors.New("no such customer"))
		if d, err := connect.NewErrorDetail(&errdetails.ResourceInfo{ResourceName: "unknown"}); err == nil {
			cerr.AddDetail(d)
		}
		cerr.Meta().Set("X-Ledger-Id", "L-"+run)
		cerr.Meta().Set("X-Debug", "D-"+run)
		return nil, cerr
	case "flaky":
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the bank is down"))
	}
	id := n
	if l.pool != nil {
		const insert = `INSERT INTO charges (customer) VALUES ($1) RETURNING id`
		var row pgx.Row
		if tx := pgstore.TxFrom(ctx); tx != nil {
			row = tx.QueryRow(ctx, insert, req.Msg.GetValue())
		} else {
			row = l.pool.QueryRow(ctx, insert, req.Msg.GetValue())
		}
		if err := row.Scan(&id); err != nil {
			return nil, err
		}
	}
	resp := connect.NewResponse(wrapperspb.Int64(id))
	resp.Header().Set("X-Ledger-Id", "L-"+run)
	resp.Header().Set("X-Seq-Bin", connect.EncodeBinaryHeader([]byte("\x00\xff"+run)))
	resp.Header().Set("X-Debug", "D-"+run)
	resp.Trailer().Set("X-Ledger-Total", "T-"+run)
	resp.Trailer().Set("X-Trace", "R-"+run)
	return resp, nil
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
	id              int64
	err             *connect.Error
	replayed        bool
	header, trailer http.Header // on an error, its metadata is header
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
		return answer{err: cerr, replayed: cerr.Meta().Get(idemproto.ReplayedHeader) == "true", header: cerr.Meta()}
	}
	return answer{id: resp.Msg.GetValue(), replayed: resp.Header().Get(idemproto.ReplayedHeader) == "true", header: resp.Header(), trailer: resp.Trailer()}
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

// handlerKeys are the metadata keys the ledger sets.
var handlerKeys = []string{"X-Ledger-Id", "X-Seq-Bin", "X-Debug", "X-Ledger-Total", "X-Trace"}

// own is the metadata of h the handler may have set.
func own(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, k := range handlerKeys {
		if vs := h.Values(k); len(vs) > 0 {
			out[k] = vs
		}
	}
	return out
}

// TestRecordMetadata: the first caller gets every header, trailer and
// error metadata the handler set; a retry's replay, of a message or of an
// error, gets those RecordMetadata lists, in the same place, and not the
// others; without RecordMetadata, a replay carries none of them. On each
// protocol on memstore, and on PostgreSQL two-phase and in one
// transaction.
func TestRecordMetadata(t *testing.T) {
	t.Parallel()
	type protocol struct {
		name string
		h2c  bool
		opts []connect.ClientOption
	}
	connectH1 := protocol{"connect HTTP/1.1", false, nil}
	grpcH2 := protocol{"grpc HTTP/2", true, []connect.ClientOption{connect.WithGRPC()}}
	for _, tc := range []struct {
		protocol
		path doortest.Path
	}{
		{connectH1, doortest.Paths[0]},
		{protocol{"connect JSON HTTP/1.1", false, []connect.ClientOption{connect.WithProtoJSON()}}, doortest.Paths[0]},
		{protocol{"grpc-web HTTP/1.1", false, []connect.ClientOption{connect.WithGRPCWeb()}}, doortest.Paths[0]},
		{protocol{"connect HTTP/2", true, nil}, doortest.Paths[0]},
		{grpcH2, doortest.Paths[0]},
		{connectH1, doortest.Paths[1]},
		{grpcH2, doortest.Paths[2]},
	} {
		t.Run(tc.name+" "+tc.path.Name, func(t *testing.T) {
			t.Parallel()
			l := &ledger{}
			var store idem.Store = memstore.New(memstore.Options{})
			if tc.path.Postgres {
				l.pool, _ = testdb.Pool(t)
				store = teststore.Migrated(t, l.pool, pgstore.Options{}, `CREATE TABLE charges (id bigserial PRIMARY KEY, customer text NOT NULL)`)
			}
			opts := idemconnect.Options{InTransaction: tc.path.InTx, RecordMetadata: []string{"x-ledger-id", "X-SEQ-BIN", "x-ledger-total"}}
			url, hc := server(t, store, l, opts, tc.h2c)
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure, tc.opts...)
			ctx := t.Context()

			first, second := charge(ctx, c, "ada", "m1", "acme"), charge(ctx, c, "ada", "m1", "acme")
			if first.err != nil || second.err != nil || !second.replayed {
				t.Fatalf("first %+v, second %+v: want the second replayed", first, second)
			}
			bin := connect.EncodeBinaryHeader([]byte("\x00\xff1"))
			if got, want := own(first.header), map[string][]string{"X-Ledger-Id": {"L-1"}, "X-Seq-Bin": {bin}, "X-Debug": {"D-1"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the first call's header %q, want %q", got, want)
			}
			if got, want := own(first.trailer), map[string][]string{"X-Ledger-Total": {"T-1"}, "X-Trace": {"R-1"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the first call's trailer %q, want %q", got, want)
			}
			if got, want := own(second.header), map[string][]string{"X-Ledger-Id": {"L-1"}, "X-Seq-Bin": {bin}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the replay's header %q, want %q", got, want)
			}
			if got, want := own(second.trailer), map[string][]string{"X-Ledger-Total": {"T-1"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the replay's trailer %q, want %q", got, want)
			}

			nf1, nf2 := charge(ctx, c, "ada", "m2", "unknown"), charge(ctx, c, "ada", "m2", "unknown")
			if code(nf1) != connect.CodeNotFound || code(nf2) != connect.CodeNotFound || !nf2.replayed {
				t.Fatalf("a NotFound retried: %v (replayed %v)", nf2.err, nf2.replayed)
			}
			if got, want := own(nf1.header), map[string][]string{"X-Ledger-Id": {"L-2"}, "X-Debug": {"D-2"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the first error's metadata %q, want %q", got, want)
			}
			if got, want := own(nf2.header), map[string][]string{"X-Ledger-Id": {"L-2"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the replayed error's metadata %q, want %q", got, want)
			}
			if n := l.runs.Load(); n != 2 {
				t.Errorf("the handler ran %d times, want 2", n)
			}

			opts.RecordMetadata = nil
			url, hc = server(t, store, &ledger{pool: l.pool}, opts, tc.h2c)
			c = connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](hc, url+chargeProcedure, tc.opts...)
			for _, customer := range []string{"acme", "unknown"} {
				charge(ctx, c, "bob", "plain-"+customer, customer)
				replay := charge(ctx, c, "bob", "plain-"+customer, customer)
				if !replay.replayed || len(own(replay.header)) != 0 || len(own(replay.trailer)) != 0 {
					t.Errorf("%s without RecordMetadata: replayed %v, header %q, trailer %q; want none of the handler's", customer, replay.replayed, own(replay.header), own(replay.trailer))
				}
			}
		})
	}
}

// TestRecordMetadataNeverRecordedPanics: a key that is never recorded
// panics at construction.
func TestRecordMetadataNeverRecordedPanics(t *testing.T) {
	for _, key := range []string{
		idemproto.ReplayedHeader, "Idempotency-Key", "Grpc-Status", "Connect-Timeout-Ms", "Content-Type",
		"Content-Length", "Connection", "Transfer-Encoding", "Set-Cookie", "Authorization",
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "RecordMetadata") {
					t.Errorf("RecordMetadata %s: panic %q", key, msg)
				}
			}()
			idemconnect.NewInterceptor(memstore.New(memstore.Options{}), idemconnect.Options{Principal: principal, RecordMetadata: []string{key}})
		}()
	}
}
