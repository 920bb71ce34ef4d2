package idemproto_test

import (
	"encoding/json"
	"errors"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/idemproto"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

// TestFingerprint: equal requests (a map built in any order) give one
// fingerprint; another procedure or another message, another.
func TestFingerprint(t *testing.T) {
	fp := func(proc string, m map[string]any) string {
		t.Helper()
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		f, err := idemproto.Fingerprint(proc, s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	big := map[string]any{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		big[k] = k
	}
	base := fp("/s.S/M", big)
	for range 20 { // Go randomises map iteration: the encoding must not follow it
		if f := fp("/s.S/M", big); f != base {
			t.Fatal("one request gave two fingerprints")
		}
	}
	if fp("/s.S/N", big) == base {
		t.Error("another procedure, same fingerprint")
	}
	if fp("/s.S/M", map[string]any{"a": "a"}) == base {
		t.Error("another message, same fingerprint")
	}
	if _, err := idemproto.Fingerprint("/s.S/M", "not a message"); err == nil {
		t.Error("a request that is not a proto message fingerprinted")
	}
}

// TestRoundTrip: a recorded message and a recorded status decode to what
// was recorded.
func TestRoundTrip(t *testing.T) {
	res, err := idemproto.Message(wrapperspb.String("hello"), idemproto.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	msg, st, md, err := idemproto.Decode(res, nil)
	if err != nil || st != nil || !proto.Equal(msg, wrapperspb.String("hello")) || md.Header != nil || md.Trailer != nil {
		t.Fatalf("Decode(message) = %v, %v, %v", msg, st, err)
	}
	detail, _ := anypb.New(wrapperspb.Int64(7))
	want := &spb.Status{Code: idemproto.NotFound, Message: "no such thing", Details: []*anypb.Any{detail}}
	if res, err = idemproto.Status(want, idemproto.Metadata{}); err != nil || res.Status != idemproto.NotFound {
		t.Fatalf("Status: %+v, %v", res, err)
	}
	msg, st, _, err = idemproto.Decode(res, nil)
	if err != nil || msg != nil || !proto.Equal(st, want) {
		t.Fatalf("Decode(status) = %v, %v, %v", msg, st, err)
	}
	if _, _, _, err := idemproto.Decode(idem.Result{Header: map[string][]string{idemproto.TypeHeader: {"no.such.Type"}}}, nil); err == nil {
		t.Error("a response of an unknown type decoded")
	}
}

func TestRefuse(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  uint32
		retry bool
	}{
		{&idemcall.InFlightError{RetryAfter: time.Second}, idemproto.Aborted, true},
		{&idem.MismatchError{}, idemproto.FailedPrecondition, false},
		{&idem.InvalidKeyError{Reason: "empty"}, idemproto.InvalidArgument, false},
		{&idemcall.UnavailableError{Err: errors.New("down"), RetryAfter: time.Second}, idemproto.Unavailable, true},
		{&idemcall.CommitError{}, idemproto.Unavailable, true},
		{&idemcall.CommitError{Limit: &idem.TxLimitError{}}, idemproto.Internal, false},
		{idemcall.ErrUnreplayable, idemproto.FailedPrecondition, false},
	} {
		r, ok := idemproto.Refuse(tc.err)
		if !ok || r.Code != tc.code || (r.RetryAfter > 0) != tc.retry || r.Message == "" {
			t.Errorf("Refuse(%v) = %+v, %v; want code %d, retry %v", tc.err, r, ok, tc.code, tc.retry)
		}
	}
	if _, ok := idemproto.Refuse(errors.New("the handler's own")); ok {
		t.Error("a call's own error taken for a refusal")
	}
}

// TestRefuseSaysWhyTheCallDidNotRun: a call that did not run is told
// whether the store failed, the server is shutting down, or its claim ended
// before it began, and never the store error's own text.
func TestRefuseSaysWhyTheCallDidNotRun(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{errors.New("dial tcp 10.0.0.7:5432: connection refused"), "the idempotency store is unavailable"},
		{engine.ErrShutdown, "the server is shutting down"},
		{idem.ErrLeaseLost, "the call's claim ended before it began"},
		{engine.ErrExecutionTimeout, "the call's claim ended before it began"},
	} {
		r, ok := idemproto.Refuse(&idemcall.UnavailableError{Err: tc.cause, RetryAfter: time.Second})
		if !ok || !strings.HasPrefix(r.Message, tc.want) || strings.Contains(r.Message, "10.0.0.7") {
			t.Errorf("Refuse(cause %v) = %q, want it to begin %q and name no store error", tc.cause, r.Message, tc.want)
		}
	}
}

// FuzzDecode: whatever a store hands back, Decode answers or errs, never
// panics.
func FuzzDecode(f *testing.F) {
	ok, _ := idemproto.Message(wrapperspb.String("x"), idemproto.Metadata{})
	f.Add(0, "google.protobuf.StringValue", ok.Body)
	f.Add(5, "google.rpc.Status", []byte{8, 5})
	f.Fuzz(func(t *testing.T, status int, typ string, body []byte) {
		_, _, _, _ = idemproto.Decode(idem.Result{Status: status, Header: map[string][]string{idemproto.TypeHeader: {typ}}, Body: body}, nil)
	})
}

// TestNewCaller: a door without a principal function panics at
// construction, naming the door; with one, its events name the door
// unless the engine's options already name an adapter.
func TestNewCaller(t *testing.T) {
	store := memstore.New(memstore.Options{})
	func() {
		defer func() {
			if msg, _ := recover().(string); !strings.HasPrefix(msg, "idemdoor: Options.Principal is nil") {
				t.Errorf("panic %q, want one naming the door and Options.Principal", msg)
			}
		}()
		idemproto.NewCaller(store, "idemdoor", false, idemcall.Options{})
	}()

	adapterOf := func(opts idemcall.Options) string {
		var events idemtest.Events
		opts.Observe = events.Observe
		caller := idemproto.NewCaller(store, "idemdoor", true, opts)
		caller.Report(idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey})
		all := events.All()
		if len(all) != 1 {
			t.Fatalf("%d events, want 1", len(all))
		}
		return all[0].Adapter
	}
	if got := adapterOf(idemcall.Options{}); got != "idemdoor" {
		t.Errorf("events name adapter %q, want idemdoor", got)
	}
	if got := adapterOf(idemcall.Options{Engine: engine.Options{Adapter: "mine"}}); got != "mine" {
		t.Errorf("events name adapter %q, want the engine's own, mine", got)
	}
}

// jsonRoundTrip is res as a store hands it back: encoded to JSON and
// decoded (PostgreSQL's jsonb keeps what this JSON says).
func jsonRoundTrip(t testing.TB, res idem.Result) idem.Result {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back idem.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return back
}

// TestMetadataRoundTrip: the headers and trailers recorded with a message
// or a status, binary "-bin" values among them, decode to what was
// recorded, through the result's JSON; they never take the place of the
// recorded type.
func TestMetadataRoundTrip(t *testing.T) {
	md := idemproto.Metadata{
		Header: map[string][]string{
			"x-ledger-id":  {"L-1", "L-2"},
			"x-ledger-bin": {"\x00\xff\xfe binary"},
			"proto-type":   {"not.The.Type"}, // a handler's header named like the type's
		},
		Trailer: map[string][]string{"x-ledger-id": {"T-1"}, "x-sum-bin": {"\x80"}},
	}
	for name, record := range map[string]func() (idem.Result, error){
		"message": func() (idem.Result, error) { return idemproto.Message(wrapperspb.String("hello"), md) },
		"status": func() (idem.Result, error) {
			return idemproto.Status(&spb.Status{Code: idemproto.NotFound, Message: "no"}, md)
		},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := record()
			if err != nil {
				t.Fatal(err)
			}
			for k := range res.Header {
				if k != textproto.CanonicalMIMEHeaderKey(k) {
					t.Errorf("result header %q is not a canonical name", k)
				}
			}
			for _, stored := range []idem.Result{res, jsonRoundTrip(t, res)} {
				msg, st, got, err := idemproto.Decode(stored, nil)
				if err != nil || (msg == nil) == (st == nil) {
					t.Fatalf("Decode: %v, %v, %v", msg, st, err)
				}
				if !reflect.DeepEqual(got, md) {
					t.Errorf("metadata %q, want %q", got, md)
				}
			}
		})
	}
}

// TestDecodeWithoutMetadata: a result recorded before metadata was (only
// the type header) decodes as it did, with no metadata.
func TestDecodeWithoutMetadata(t *testing.T) {
	var old idem.Result
	if err := json.Unmarshal([]byte(`{"header":{"Proto-Type":["google.protobuf.StringValue"]},"body":"\n\u0005hello"}`), &old); err != nil {
		t.Fatal(err)
	}
	msg, st, md, err := idemproto.Decode(old, nil)
	if err != nil || st != nil || !proto.Equal(msg, wrapperspb.String("hello")) || md.Header != nil || md.Trailer != nil {
		t.Fatalf("Decode(old) = %v, %v, %+v, %v", msg, st, md, err)
	}
}

// TestMetadataKeys: a key that is never recorded panics, naming the door
// and the key; the keys kept are the listed ones, in any case, values
// copied.
func TestMetadataKeys(t *testing.T) {
	for _, key := range []string{
		"", "x ledger", "x:ledger", ":status", idemproto.KeyHeader, "Idempotent-Replayed", "grpc-status", "grpc-foo",
		"Content-Type", "connect-timeout-ms", "Content-Length", "connection", "Transfer-Encoding", "te",
		"Set-Cookie", "authorization",
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.HasPrefix(msg, "idemdoor: Options.RecordMetadata") || !strings.Contains(msg, key) {
					t.Errorf("RecordMetadata %q: panic %q, want one naming the option and the key", key, msg)
				}
			}()
			idemproto.NewMetadataKeys("idemdoor", []string{"x-fine", key})
		}()
	}
	if !idemproto.NewMetadataKeys("idemdoor", nil).Empty() || !idemproto.NewMetadataKeys("idemdoor", []string{}).Empty() {
		t.Error("no keys, not empty")
	}
	keys := idemproto.NewMetadataKeys("idemdoor", []string{"X-Ledger-Id", "x-sum-bin", "x_under.dot"})
	header := map[string][]string{"X-Ledger-Id": {"a"}, "X-Other": {"b"}, "x_under.dot": {"c"}, "X-Sum-Bin": {}}
	got := keys.Keep(header, map[string][]string{"x-sum-bin": {"\xff"}, "x-other": {"d"}})
	want := idemproto.Metadata{
		Header:  map[string][]string{"x-ledger-id": {"a"}, "x_under.dot": {"c"}},
		Trailer: map[string][]string{"x-sum-bin": {"\xff"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Keep = %q, want %q", got, want)
	}
	header["X-Ledger-Id"][0] = "changed"
	if got.Header["x-ledger-id"][0] != "a" {
		t.Error("Keep shares the handler's values")
	}
	if md := idemproto.NewMetadataKeys("idemdoor", nil).Keep(header, header); md.Header != nil || md.Trailer != nil {
		t.Errorf("no keys kept %q", md)
	}
}

// FuzzMetadataRoundTrip: any value of any recordable key, header or
// trailer, comes back from the result's JSON as it went in.
func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add("x-ledger-id", "L-1", "x-sum-bin", "\x00\xff")
	f.Add("Proto-Type", "", "X-A", "\u2028<&>")
	f.Fuzz(func(t *testing.T, hk, hv, tk, tv string) {
		var keys idemproto.MetadataKeys
		func() {
			defer func() { _ = recover() }()
			keys = idemproto.NewMetadataKeys("fuzz", []string{hk, tk})
		}()
		if keys.Empty() {
			return
		}
		md := keys.Keep(map[string][]string{hk: {hv}}, map[string][]string{tk: {tv}})
		res, err := idemproto.Message(wrapperspb.String("x"), md)
		if err != nil {
			t.Fatal(err)
		}
		_, _, got, err := idemproto.Decode(jsonRoundTrip(t, res), nil)
		if err != nil || !reflect.DeepEqual(got, md) {
			t.Fatalf("metadata %q (%v), want %q", got, err, md)
		}
	})
}
