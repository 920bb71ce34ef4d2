// Package idemgrpc makes unary grpc-go calls idempotent: a server
// interceptor that runs a call once per idempotency key and answers every
// retry with the same key with the recorded response and status, durably,
// through an idem store.
//
// The client sends the key in the "idempotency-key" metadata. The key
// belongs to the caller that [Options].Principal names, and to one request:
// the fingerprint covers the full method and the request message's
// deterministic proto encoding, so a key reused for another method or
// message is refused with FailedPrecondition. A replayed answer carries
// the header "idempotent-replayed: true", and the handler's own headers
// and trailers of the keys [Options].RecordMetadata lists; others are not
// recorded. Which status codes are recorded, and how a call that did not
// run is answered (Aborted with a RetryInfo while its key is in flight),
// is [idemproto]'s; the engine under it is the one the net/http middleware
// and the MCP adapter use.
package idemgrpc

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/idemproto"
)

// AdapterName names the adapter in every [idem.Event] of the interceptor
// when Options.Engine.Adapter is empty.
const AdapterName = "idemgrpc"

// Options configures [UnaryServerInterceptor].
type Options struct {
	// Engine holds the engine's settings: lease, Wait (how long a retry
	// waits for the call in flight with its key before it is answered
	// Aborted; zero: not at all), timeouts, shutdown, logger. Invalid
	// values panic at construction.
	Engine engine.Options

	// InTransaction runs each handler inside the transaction its key is
	// claimed in (the store must be an [idem.TxStore], such as pgstore):
	// the handler writes its rows through pgstore.TxFrom(ctx), and they
	// commit together with the recorded answer, or not at all. The client
	// gets the answer only once it committed. False means the two-phase
	// path: any effect, recorded after the handler returned.
	InTransaction bool

	// Principal names the authenticated caller of a call (from its peer's
	// certificate, or the identity an authentication interceptor put in
	// ctx): the scope of its keys, so that one caller's key never finds
	// another's answer. A call for which it returns "" is refused with
	// Unauthenticated. Nil panics: a service with a single caller returns
	// a constant.
	Principal func(ctx context.Context) string

	// RequireKey refuses a call without an idempotency key with
	// InvalidArgument. False passes it through to the handler,
	// unprotected.
	RequireKey bool

	// Methods, when not nil, reports whether the full method
	// ("/package.Service/Method") is protected; others pass through.
	// Nil protects every unary method.
	Methods func(fullMethod string) bool

	// Record reports whether an answer with a status code is recorded
	// and replayed; one that is not releases the key, and a retry runs
	// the handler again. Nil means [idemproto.Recorded].
	Record func(codes.Code) bool

	// RecordMetadata lists the keys of the handler's headers and
	// trailers (grpc.SetHeader, SendHeader, SetTrailer) recorded with its
	// answer, OK or error, and replayed to every retry (case-insensitive).
	// Nil means none. idempotency-key, idempotent-replayed, grpc-*,
	// content-type, hop-by-hop and framing headers, set-cookie and
	// authorization are never recorded: listing one panics (the list is
	// [idemproto.NewMetadataKeys]'). With keys listed, the handler's
	// context carries a stream of the interceptor's, which passes every
	// header and trailer on to grpc's own; grpc.SetSendCompressor and
	// grpc.ClientSupportedCompressors, which need grpc's own, fail there.
	RecordMetadata []string

	// Types finds the type of a recorded response by its full name when
	// it is replayed. Nil means protoregistry.GlobalTypes, where
	// generated code registers its messages.
	Types idemproto.Resolver

	// Observe, when not nil, receives each [idem.Event]. It must be fast
	// and safe for concurrent use.
	Observe func(idem.Event)
}

// UnaryServerInterceptor returns the interceptor, over store. It panics if
// store is nil, Principal is nil, InTransaction is set with a store that is
// not an [idem.TxStore], Options.Engine is invalid, or
// Options.RecordMetadata lists a key that is never recorded.
func UnaryServerInterceptor(store idem.Store, opts Options) grpc.UnaryServerInterceptor {
	caller := idemproto.NewCaller(store, AdapterName, opts.Principal != nil,
		idemcall.Options{Engine: opts.Engine, InTransaction: opts.InTransaction, Observe: opts.Observe})
	metaKeys := idemproto.NewMetadataKeys(AdapterName, opts.RecordMetadata)
	record := idemproto.Recorded
	if opts.Record != nil {
		record = func(c uint32) bool { return opts.Record(codes.Code(c)) }
	}

	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if opts.Methods != nil && !opts.Methods(info.FullMethod) {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		keys := md.Get(idemproto.KeyHeader)
		switch {
		case len(keys) == 0 && opts.RequireKey:
			caller.Report(idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedMissingKey})
			return nil, status.Errorf(codes.InvalidArgument, "%s requires an %s in the call's metadata", info.FullMethod, idemproto.KeyHeader)
		case len(keys) == 0:
			caller.Report(idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey})
			return handler(ctx, req)
		case len(keys) > 1:
			caller.Report(idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey})
			return nil, status.Errorf(codes.InvalidArgument, "the call's metadata carries %d %s values; send one", len(keys), idemproto.KeyHeader)
		}
		principal := opts.Principal(ctx)
		if principal == "" {
			return nil, status.Error(codes.Unauthenticated, "an idempotent call needs an authenticated caller")
		}
		fp, err := idemproto.Fingerprint(info.FullMethod, req)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}

		var (
			resp    any
			handErr error
		)
		out, err := idemproto.Serve(ctx, caller, idemcall.Call{Scope: principal, Key: keys[0], Fingerprint: fp, Labels: idemproto.Labels(info.FullMethod, principal)}, record, opts.Types,
			func(err error) *spb.Status { return status.Convert(err).Proto() },
			func(ctx context.Context) (any, idemproto.Metadata, error) {
				var rec *recorder
				if s := grpc.ServerTransportStreamFromContext(ctx); s != nil && !metaKeys.Empty() {
					rec = &recorder{ServerTransportStream: s}
					ctx = grpc.NewContextWithServerTransportStream(ctx, rec)
				}
				resp, handErr = handler(ctx, req)
				return resp, rec.keep(metaKeys), handErr
			})
		switch {
		case err != nil:
			return nil, refusal(err)
		case out.Ran:
			return resp, handErr
		}
		_ = grpc.SetHeader(ctx, metadata.Join(out.Metadata.Header, metadata.Pairs(idemproto.ReplayedHeader, "true")))
		_ = grpc.SetTrailer(ctx, out.Metadata.Trailer)
		if out.Status != nil {
			return nil, status.FromProto(out.Status).Err()
		}
		return out.Msg, nil
	}
}

// recorder is the stream a handler's context carries when metadata is
// recorded: it passes every call on to grpc's stream, so the caller gets
// what it would without it, and keeps the header and trailer the handler
// set. A header set after the header was sent is not kept: grpc refuses
// it, and the caller does not get it.
type recorder struct {
	grpc.ServerTransportStream
	mu              sync.Mutex
	sent            bool
	header, trailer metadata.MD
}

func (r *recorder) SetHeader(md metadata.MD) error {
	err := r.ServerTransportStream.SetHeader(md)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sent {
		r.header = metadata.Join(r.header, md)
	}
	return err
}

func (r *recorder) SendHeader(md metadata.MD) error {
	err := r.ServerTransportStream.SendHeader(md)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sent {
		r.header, r.sent = metadata.Join(r.header, md), true
	}
	return err
}

func (r *recorder) SetTrailer(md metadata.MD) error {
	err := r.ServerTransportStream.SetTrailer(md)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trailer = metadata.Join(r.trailer, md)
	return err
}

// keep is what of the header and trailer r kept keys records; nothing
// when r is nil.
func (r *recorder) keep(keys idemproto.MetadataKeys) idemproto.Metadata {
	if r == nil {
		return idemproto.Metadata{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return keys.Keep(r.header, r.trailer)
}

// refusal is the status of a call that did not run and has no recorded
// answer: idemproto's mapping, with a RetryInfo for a code a retry may
// clear; or err's own status (the call's context ended).
func refusal(err error) error {
	r, ok := idemproto.Refuse(err)
	if !ok {
		return status.FromContextError(err).Err()
	}
	st := status.New(codes.Code(r.Code), r.Message)
	if r.RetryAfter > 0 {
		if withRetry, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); derr == nil {
			st = withRetry
		}
	}
	return st.Err()
}
