// Package idemconnect makes unary connectrpc.com/connect procedures
// idempotent: a handler interceptor that runs a call once per idempotency
// key and answers every retry with the same key with the recorded response
// message or error, durably, through an idem store. It has the semantics of
// idemgrpc, for Connect's three protocols (Connect, gRPC, gRPC-Web) alike.
//
// The client sends the key in the "Idempotency-Key" request header. The
// key belongs to the caller that [Options].Principal names, and to one
// request: the fingerprint covers the procedure and the request message's
// deterministic proto encoding, whatever codec (proto or JSON) carried it.
// A replayed answer carries the header "Idempotent-Replayed: true" (on an
// error, in its metadata), and the handler's own headers and trailers, or
// its error's metadata, of the keys [Options].RecordMetadata lists; others
// are not recorded. Which codes are recorded, and how a call that did not
// run is answered, is [idemproto]'s.
//
// # The interceptor or the net/http middleware
//
// A Connect handler is an http.Handler, so idem's net/http middleware can
// wrap it too. It suffices for a service whose clients all speak the
// Connect protocol with the proto codec, and where what must be replayed
// is the response bytes: it keys and fingerprints the HTTP request (its
// body as sent, so the same message in JSON and in proto are two
// requests), records the HTTP response whole, and answers its own refusals
// as HTTP problems, which a gRPC or gRPC-Web client cannot read, and with
// a streamed gRPC response it records nothing useful. The interceptor sees
// the decoded request and response messages instead: its fingerprint is
// the message's, whatever the protocol and codec; it replays the message
// and error through the protocol the retry came with; and it answers its
// refusals as Connect errors with codes (Aborted while in flight,
// FailedPrecondition for a reused key) that every Connect and gRPC client
// reads.
package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/idemproto"
)

// AdapterName names the adapter in every [idem.Event] of the interceptor
// when Options.Engine.Adapter is empty.
const AdapterName = "idemconnect"

// Options configures [NewInterceptor].
type Options struct {
	// Engine holds the engine's settings: lease, Wait (how long a retry
	// waits for the call in flight with its key before it is answered
	// Aborted; zero: not at all), timeouts, shutdown, logger. Invalid
	// values panic at construction.
	Engine engine.Options

	// InTransaction runs each handler inside the transaction its key is
	// claimed in (the store must be an [idem.TxStore], such as pgstore):
	// the handler writes its rows through pgstore.TxFrom(ctx), and they
	// commit together with the recorded answer, or not at all. False
	// means the two-phase path.
	InTransaction bool

	// Principal names the authenticated caller of a request (from the
	// identity an authentication middleware put in ctx, or req's peer or
	// headers): the scope of its keys. A request for which it returns ""
	// is refused with Unauthenticated. Nil panics: a service with a
	// single caller returns a constant.
	Principal func(ctx context.Context, req connect.AnyRequest) string

	// RequireKey refuses a request without an idempotency key with
	// InvalidArgument. False passes it through, unprotected.
	RequireKey bool

	// Procedures, when not nil, reports whether a procedure
	// ("/package.Service/Method") is protected; others pass through. Nil
	// protects every unary procedure.
	Procedures func(procedure string) bool

	// Record reports whether an answer with a code is recorded and
	// replayed (a success is code 0); one that is not releases the key,
	// and a retry runs the handler again. Nil means [idemproto.Recorded].
	Record func(code uint32) bool

	// RecordMetadata lists the keys of the handler's response headers
	// and trailers, and of its error's metadata, recorded with its answer
	// and replayed to every retry in the same place (case-insensitive).
	// Nil means none. Idempotency-Key, Idempotent-Replayed, Grpc-*,
	// Connect-*, Content-Type, hop-by-hop and framing headers
	// (Content-Length, Connection, Transfer-Encoding, ...), Set-Cookie and
	// Authorization are never recorded: listing one panics (the list is
	// [idemproto.NewMetadataKeys]').
	RecordMetadata []string

	// Types finds the type of a recorded response when it is replayed.
	// Nil means protoregistry.GlobalTypes.
	Types idemproto.Resolver

	// Observe, when not nil, receives each [idem.Event]. It must be fast
	// and safe for concurrent use.
	Observe func(idem.Event)
}

// NewInterceptor returns the interceptor, over store, for
// connect.WithInterceptors on a handler. It passes client calls through.
// It panics if store is nil, Principal is nil, InTransaction is set with a
// store that is not an [idem.TxStore], Options.Engine is invalid, or
// Options.RecordMetadata lists a key that is never recorded.
func NewInterceptor(store idem.Store, opts Options) connect.Interceptor {
	caller := idemproto.NewCaller(store, AdapterName, opts.Principal != nil,
		idemcall.Options{Engine: opts.Engine, InTransaction: opts.InTransaction, Observe: opts.Observe})
	metaKeys := idemproto.NewMetadataKeys(AdapterName, opts.RecordMetadata)
	if opts.Record == nil {
		opts.Record = idemproto.Recorded
	}
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			procedure := req.Spec().Procedure
			if req.Spec().IsClient || opts.Procedures != nil && !opts.Procedures(procedure) {
				return next(ctx, req)
			}
			keys := req.Header().Values(idemproto.KeyHeader)
			switch {
			case len(keys) == 0 && opts.RequireKey:
				caller.Report(idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedMissingKey})
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s requires an Idempotency-Key header", procedure))
			case len(keys) == 0:
				caller.Report(idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey})
				return next(ctx, req)
			case len(keys) > 1:
				caller.Report(idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey})
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the request carries %d Idempotency-Key headers; send one", len(keys)))
			}
			principal := opts.Principal(ctx, req)
			if principal == "" {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("an idempotent call needs an authenticated caller"))
			}
			fp, err := idemproto.Fingerprint(procedure, req.Any())
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}

			var (
				resp    connect.AnyResponse
				handErr error
			)
			out, err := idemproto.Serve(ctx, caller, idemcall.Call{Scope: principal, Key: keys[0], Fingerprint: fp, Labels: idemproto.Labels(procedure, principal)}, opts.Record, opts.Types, statusOf,
				func(ctx context.Context) (any, idemproto.Metadata, error) {
					if resp, handErr = next(ctx, req); handErr != nil {
						var cerr *connect.Error
						if errors.As(handErr, &cerr) {
							return nil, metaKeys.Keep(cerr.Meta(), nil), handErr
						}
						return nil, idemproto.Metadata{}, handErr
					}
					return resp.Any(), metaKeys.Keep(resp.Header(), resp.Trailer()), nil
				})
			switch {
			case err != nil:
				return nil, refusal(err)
			case out.Ran:
				return resp, handErr
			case out.Status != nil:
				cerr := errorOf(out.Status)
				addAll(cerr.Meta(), out.Metadata.Header)
				cerr.Meta().Set(idemproto.ReplayedHeader, "true")
				return nil, cerr
			}
			replay := connect.NewResponse(&message{out.Msg})
			addAll(replay.Header(), out.Metadata.Header)
			addAll(replay.Trailer(), out.Metadata.Trailer)
			replay.Header().Set(idemproto.ReplayedHeader, "true")
			return replay, nil
		}
	})
}

// message carries a replayed response of any type: the codecs marshal
// the proto.Message it embeds.
type message struct{ proto.Message }

// addAll adds the recorded metadata md to h.
func addAll(h http.Header, md map[string][]string) {
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// statusOf is a handler's error as a google.rpc.Status: its code, message
// and details.
func statusOf(err error) *spb.Status {
	st := &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		st.Message = cerr.Message()
		for _, d := range cerr.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
		}
	}
	return st
}

// errorOf is a recorded status as a Connect error.
func errorOf(st *spb.Status) *connect.Error {
	cerr := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
	for _, d := range st.GetDetails() {
		if detail, err := connect.NewErrorDetail(d); err == nil {
			cerr.AddDetail(detail)
		}
	}
	return cerr
}

// refusal is the error of a call that did not run and has no recorded
// answer: idemproto's mapping, with a RetryInfo for a code a retry may
// clear; or err itself (the call's context ended).
func refusal(err error) error {
	r, ok := idemproto.Refuse(err)
	if !ok {
		return err
	}
	cerr := connect.NewError(connect.Code(r.Code), errors.New(r.Message))
	if r.RetryAfter > 0 {
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); err == nil {
			cerr.AddDetail(d)
		}
	}
	return cerr
}
