package idemproto_test

import (
	"errors"
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
	res, err := idemproto.Message(wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	msg, st, err := idemproto.Decode(res, nil)
	if err != nil || st != nil || !proto.Equal(msg, wrapperspb.String("hello")) {
		t.Fatalf("Decode(message) = %v, %v, %v", msg, st, err)
	}
	detail, _ := anypb.New(wrapperspb.Int64(7))
	want := &spb.Status{Code: idemproto.NotFound, Message: "no such thing", Details: []*anypb.Any{detail}}
	if res, err = idemproto.Status(want); err != nil || res.Status != idemproto.NotFound {
		t.Fatalf("Status: %+v, %v", res, err)
	}
	msg, st, err = idemproto.Decode(res, nil)
	if err != nil || msg != nil || !proto.Equal(st, want) {
		t.Fatalf("Decode(status) = %v, %v, %v", msg, st, err)
	}
	if _, _, err := idemproto.Decode(idem.Result{Header: map[string][]string{idemproto.TypeHeader: {"no.such.Type"}}}, nil); err == nil {
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

// FuzzDecode: whatever a store hands back, Decode answers or errs, never
// panics.
func FuzzDecode(f *testing.F) {
	ok, _ := idemproto.Message(wrapperspb.String("x"))
	f.Add(0, "google.protobuf.StringValue", ok.Body)
	f.Add(5, "google.rpc.Status", []byte{8, 5})
	f.Fuzz(func(t *testing.T, status int, typ string, body []byte) {
		_, _, _ = idemproto.Decode(idem.Result{Status: status, Header: map[string][]string{idemproto.TypeHeader: {typ}}, Body: body}, nil)
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
