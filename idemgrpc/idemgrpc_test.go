package idemgrpc_test

import (
	"context"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemproto"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/doortest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/pgstore"
)

// ledger is the service under test, registered by hand (no protoc): its
// one method, /test.Ledger/Charge, takes the customer as a StringValue and
// answers the charge's id as an Int64Value. A customer "unknown" is
// NotFound (recorded), "flaky" Unavailable (not recorded). Every call sets
// the header and trailer of handlerMetadata, a binary one among them.
type ledger struct {
	pool  *pgxpool.Pool // nil: no database; the charge is counted only
	runs  atomic.Int64
	enter chan struct{} // when not nil, told when a call starts
	gate  chan struct{} // when not nil, a call waits for it to close
}

const chargeMethod = "/test.Ledger/Charge"

// handlerMetadata is what the handler sets: header and trailer keys, the
// ones recordMetadata lists recorded, and the values of the run (n).
func handlerMetadata(n int64) (header, trailer metadata.MD) {
	run := strconv.FormatInt(n, 10)
	return metadata.Pairs("x-ledger-id", "L-"+run, "x-seq-bin", "\x00\xff"+run, "x-debug", "D-"+run),
		metadata.Pairs("x-ledger-total", "T-"+run, "x-trace", "R-"+run)
}

// recordMetadata records three of handlerMetadata's five keys, in any case.
var recordMetadata = []string{"X-Ledger-Id", "x-seq-bin", "X-LEDGER-TOTAL"}

func (l *ledger) charge(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.Int64Value, error) {
	n := l.runs.Add(1)
	header, trailer := handlerMetadata(n)
	if err := grpc.SetHeader(ctx, header); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, trailer); err != nil {
		return nil, err
	}
	if l.enter != nil {
		l.enter <- struct{}{}
	}
	if l.gate != nil {
		<-l.gate
	}
	switch in.GetValue() {
	case "unknown":
		st, _ := status.New(codes.NotFound, "no such customer").WithDetails(&errdetails.ResourceInfo{ResourceName: in.GetValue()})
		return nil, st.Err()
	case "flaky":
		return nil, status.Error(codes.Unavailable, "the bank is down")
	}
	if l.pool == nil {
		return wrapperspb.Int64(n), nil
	}
	var id int64
	const insert = `INSERT INTO charges (customer) VALUES ($1) RETURNING id`
	var err error
	if tx := pgstore.TxFrom(ctx); tx != nil {
		err = tx.QueryRow(ctx, insert, in.GetValue()).Scan(&id)
	} else {
		err = l.pool.QueryRow(ctx, insert, in.GetValue()).Scan(&id)
	}
	return wrapperspb.Int64(id), err
}

var ledgerDesc = grpc.ServiceDesc{
	ServiceName: "test.Ledger",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*ledger).charge(ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
		},
	}},
}

// principal is the caller's name from the "user" metadata, standing in
// for what an authentication interceptor establishes.
func principal(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("user"); len(v) == 1 {
		return v[0]
	}
	return ""
}

// rig is a real grpc-go server on loopback with the interceptor, and a
// client connected to it through conns, which a test can cut.
type rig struct {
	l     *ledger
	cc    *grpc.ClientConn
	mu    sync.Mutex
	conns []net.Conn
}

func newRig(t *testing.T, store idem.Store, l *ledger, opts idemgrpc.Options) *rig {
	t.Helper()
	if opts.Principal == nil {
		opts.Principal = principal
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(store, opts)))
	srv.RegisterService(&ledgerDesc, l)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	r := &rig{l: l}
	r.cc, err = grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				r.mu.Lock()
				r.conns = append(r.conns, c)
				r.mu.Unlock()
			}
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.cc.Close()
		srv.Stop()
		<-served
	})
	return r
}

// cut closes every connection the client has.
func (r *rig) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

// answer is what the client got from one call.
type answer struct {
	id              int64
	st              *status.Status
	replayed        bool
	header, trailer metadata.MD
}

func (r *rig) charge(ctx context.Context, user, key, customer string) answer {
	pairs := []string{"user", user}
	if key != "" {
		pairs = append(pairs, idemproto.KeyHeader, key)
	}
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(pairs...))
	var header, trailer metadata.MD
	out := new(wrapperspb.Int64Value)
	err := r.cc.Invoke(ctx, chargeMethod, wrapperspb.String(customer), out, grpc.Header(&header), grpc.Trailer(&trailer))
	return answer{id: out.GetValue(), st: status.Convert(err), replayed: len(header.Get(idemproto.ReplayedHeader)) == 1, header: header, trailer: trailer}
}

// newPool is a migrated schema with the charges table, and a store on it.
func newPool(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool, _ := testdb.Pool(t)
	return pool, teststore.Migrated(t, pool, pgstore.Options{PollInterval: 50 * time.Millisecond},
		`CREATE TABLE charges (id bigserial PRIMARY KEY, customer text NOT NULL)`)
}

func charges(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pathRig is a rig with a fresh ledger on path: memstore, or a migrated
// PostgreSQL schema, with opts.InTransaction as path says.
func pathRig(t *testing.T, path doortest.Path, opts idemgrpc.Options) (*rig, *ledger) {
	t.Helper()
	l := &ledger{}
	var store idem.Store = memstore.New(memstore.Options{})
	if path.Postgres {
		l.pool, store = newPool(t)
	}
	opts.InTransaction = path.InTx
	return newRig(t, store, l, opts), l
}

// TestReplayOnEveryPath: a retry gets the first call's message, or its
// recorded error status with its details, marked replayed; a status not
// recorded runs again; on memstore, PostgreSQL two-phase and in one
// transaction.
func TestReplayOnEveryPath(t *testing.T) {
	t.Parallel()
	for _, tc := range doortest.Paths {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			r, l := pathRig(t, tc, idemgrpc.Options{})
			ctx := t.Context()

			first := r.charge(ctx, "ada", "k1", "acme")
			second := r.charge(ctx, "ada", "k1", "acme")
			if first.st.Code() != codes.OK || first.id == 0 || first.replayed || second.st.Code() != codes.OK || !second.replayed || second.id != first.id {
				t.Fatalf("first %+v, second %+v: want the same id, the second replayed", first, second)
			}
			other := r.charge(ctx, "bob", "k1", "acme") // another caller's key space
			if other.replayed || other.st.Code() != codes.OK {
				t.Errorf("another caller with the same key: %+v, want a run of its own", other)
			}

			nf1, nf2 := r.charge(ctx, "ada", "k2", "unknown"), r.charge(ctx, "ada", "k2", "unknown")
			if nf2.st.Code() != codes.NotFound || !nf2.replayed || !proto.Equal(nf1.st.Proto(), nf2.st.Proto()) || len(nf2.st.Details()) != 1 {
				t.Errorf("a NotFound retried: %v (replayed %v), want %v replayed with its details", nf2.st.Proto(), nf2.replayed, nf1.st.Proto())
			}
			before := l.runs.Load()
			f1, f2 := r.charge(ctx, "ada", "k3", "flaky"), r.charge(ctx, "ada", "k3", "flaky")
			if f1.st.Code() != codes.Unavailable || f2.replayed || l.runs.Load()-before != 2 {
				t.Errorf("an Unavailable retried: %v %v, runs %d: want it run again", f1.st, f2.replayed, l.runs.Load()-before)
			}
			if l.runs.Load() != 5 {
				t.Errorf("the handler ran %d times, want 5", l.runs.Load())
			}
			if tc.Postgres {
				if n := charges(t, l.pool); n != 2 {
					t.Errorf("%d charges, want 2", n)
				}
			}
		})
	}
}

// TestConnectionCutAfterTheServerRan: the client's connection is cut
// while the handler runs; the handler completes and its answer is
// recorded; the client's retry, on a new connection, gets the replay and
// the charge happened once.
func TestConnectionCutAfterTheServerRan(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "two-phase", true: "in a transaction"}[inTx], func(t *testing.T) {
			t.Parallel()
			l := &ledger{enter: make(chan struct{}, 1), gate: make(chan struct{})}
			var store *pgstore.Store
			l.pool, store = newPool(t)
			r := newRig(t, store, l, idemgrpc.Options{InTransaction: inTx, Engine: engine.Options{Wait: 30 * time.Second}})
			got := make(chan answer)
			go func() { got <- r.charge(t.Context(), "ada", "cut", "acme") }()
			<-l.enter
			r.cut()
			if a := <-got; a.st.Code() != codes.Unavailable {
				t.Fatalf("the cut call: %v, want Unavailable", a.st)
			}
			close(l.gate) // the handler finishes after its client is gone
			l.enter = nil
			retry := r.charge(t.Context(), "ada", "cut", "acme")
			if retry.st.Code() != codes.OK || !retry.replayed || retry.id == 0 {
				t.Fatalf("the retry: %+v, want the replayed charge", retry)
			}
			if l.runs.Load() != 1 || charges(t, l.pool) != 1 {
				t.Errorf("runs %d, charges %d; want 1 and 1", l.runs.Load(), charges(t, l.pool))
			}
		})
	}
}

// TestRefusals: in flight is Aborted with a RetryInfo; a key reused for
// another request is FailedPrecondition; a call without a key passes
// through, or is InvalidArgument with RequireKey; an unnamed caller is
// Unauthenticated.
func TestRefusals(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	l := &ledger{enter: make(chan struct{}, 1), gate: make(chan struct{})}
	r := newRig(t, store, l, idemgrpc.Options{})
	ctx := t.Context()
	done := make(chan answer)
	go func() { done <- r.charge(ctx, "ada", "busy", "acme") }()
	<-l.enter
	inFlight := r.charge(ctx, "ada", "busy", "acme")
	close(l.gate)
	<-done
	l.enter, l.gate = nil, nil
	var retry *errdetails.RetryInfo
	for _, d := range inFlight.st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if inFlight.st.Code() != codes.Aborted || retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Errorf("in flight: %v, want Aborted with a RetryInfo", inFlight.st.Proto())
	}
	if a := r.charge(ctx, "ada", "busy", "globex"); a.st.Code() != codes.FailedPrecondition {
		t.Errorf("the key with another request: %v, want FailedPrecondition", a.st)
	}
	if a := r.charge(ctx, "", "k", "acme"); a.st.Code() != codes.Unauthenticated {
		t.Errorf("no caller: %v, want Unauthenticated", a.st)
	}
	if a := r.charge(ctx, "ada", strings.Repeat("k", idem.MaxHeaderKeyLen+1), "acme"); a.st.Code() != codes.InvalidArgument {
		t.Errorf("a bad key: %v, want InvalidArgument", a.st)
	}
	before := l.runs.Load()
	if a, b := r.charge(ctx, "ada", "", "acme"), r.charge(ctx, "ada", "", "acme"); a.st.Code() != codes.OK || b.replayed || l.runs.Load()-before != 2 {
		t.Errorf("no key: %v %v, want both run", a.st, b.replayed)
	}
	strict := newRig(t, store, &ledger{}, idemgrpc.Options{RequireKey: true})
	if a := strict.charge(ctx, "ada", "", "acme"); a.st.Code() != codes.InvalidArgument {
		t.Errorf("no key with RequireKey: %v, want InvalidArgument", a.st)
	}
}

func TestNilPrincipalPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	idemgrpc.UnaryServerInterceptor(memstore.New(memstore.Options{}), idemgrpc.Options{})
}

// TestRefusalsAndLabelsReported: the interceptor reports a call it refuses
// before a claim, and one it runs without a key, as the HTTP adapters
// do, by reason; a claim stores the method and the principal as labels.
func TestRefusalsAndLabelsReported(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	var events idemtest.Events
	ctx := t.Context()
	loose := newRig(t, store, &ledger{}, idemgrpc.Options{Observe: events.Observe})
	loose.charge(ctx, "ada", "", "acme")
	loose.charge(ctx, "ada", strings.Repeat("k", idem.MaxHeaderKeyLen+1), "acme")
	newRig(t, store, &ledger{}, idemgrpc.Options{RequireKey: true, Observe: events.Observe}).charge(ctx, "ada", "", "acme")
	doortest.WantRefusals(t, events.All(), idemgrpc.AdapterName)

	if a := loose.charge(ctx, "ada", "labelled", "acme"); a.st.Code() != codes.OK {
		t.Fatal(a.st)
	}
	doortest.WantLabels(t, store, chargeMethod)
}

// own is the metadata of md the handler set: without grpc's own and the
// replay marker, as a plain map (metadata.MD prints redacted).
func own(md metadata.MD) map[string][]string {
	out := map[string][]string{}
	for k, vs := range md {
		if k != "content-type" && !strings.HasPrefix(k, "grpc-") && k != idemproto.ReplayedHeader {
			out[k] = vs
		}
	}
	return out
}

// TestRecordMetadata: the first caller gets every header and trailer the
// handler set; a retry's replay, of a message or of an error status, gets
// those RecordMetadata lists, the binary one intact, and not the others;
// without RecordMetadata, a replay carries only idempotent-replayed. On
// memstore, PostgreSQL two-phase and in one transaction.
func TestRecordMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range doortest.Paths {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			r, l := pathRig(t, tc, idemgrpc.Options{RecordMetadata: recordMetadata})
			ctx := t.Context()
			for i, customer := range []string{"acme", "unknown"} {
				key := "m" + customer
				first, second := r.charge(ctx, "ada", key, customer), r.charge(ctx, "ada", key, customer)
				if !second.replayed || second.st.Code() != first.st.Code() {
					t.Fatalf("%s: first %v, second %v (replayed %v): want the second replayed", customer, first.st, second.st, second.replayed)
				}
				header, trailer := handlerMetadata(int64(i + 1))
				if got, want := own(first.header), own(header); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: the first call's header %q, want %q", customer, got, want)
				}
				if got, want := own(first.trailer), own(trailer); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: the first call's trailer %q, want %q", customer, got, want)
				}
				run := strconv.Itoa(i + 1)
				if got, want := own(second.header), map[string][]string{"x-ledger-id": {"L-" + run}, "x-seq-bin": {"\x00\xff" + run}}; !reflect.DeepEqual(got, want) {
					t.Errorf("%s: the replay's header %q, want %q", customer, got, want)
				}
				if got, want := own(second.trailer), map[string][]string{"x-ledger-total": {"T-" + run}}; !reflect.DeepEqual(got, want) {
					t.Errorf("%s: the replay's trailer %q, want %q", customer, got, want)
				}
			}
			if n := l.runs.Load(); n != 2 {
				t.Errorf("the handler ran %d times, want 2", n)
			}

			none, _ := pathRig(t, tc, idemgrpc.Options{})
			none.charge(ctx, "bob", "plain", "acme")
			replay := none.charge(ctx, "bob", "plain", "acme")
			if got := own(replay.header); !replay.replayed || len(got) != 0 || len(own(replay.trailer)) != 0 {
				t.Errorf("without RecordMetadata, the replay's header %q and trailer %q (replayed %v), want only %s", got, own(replay.trailer), replay.replayed, idemproto.ReplayedHeader)
			}
		})
	}
}

// TestRecordMetadataNeverRecordedPanics: a key that is never recorded
// panics at construction.
func TestRecordMetadataNeverRecordedPanics(t *testing.T) {
	for _, key := range []string{idemproto.ReplayedHeader, idemproto.KeyHeader, "grpc-status", "Content-Type", "authorization"} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "RecordMetadata") {
					t.Errorf("RecordMetadata %s: panic %q", key, msg)
				}
			}()
			idemgrpc.UnaryServerInterceptor(memstore.New(memstore.Options{}), idemgrpc.Options{Principal: principal, RecordMetadata: []string{key}})
		}()
	}
}
