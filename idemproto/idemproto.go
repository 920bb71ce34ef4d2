// Package idemproto is what the RPC doors to idem share (idemgrpc for
// grpc-go, idemconnect for connectrpc.com/connect): the fingerprint of a
// call over its procedure and its request message's deterministic proto
// encoding, the [idem.Result] a response or an error status is recorded
// as, which status codes are recorded, and the status code of each way a
// call can be refused. Codes are the gRPC codes, which Connect shares
// (0 OK to 16 Unauthenticated).
//
// A recorded call is an [idem.Result] whose Status is the call's status
// code (0 for OK), whose Header names the recorded message's full type
// under [TypeHeader], and whose Body is that message's proto encoding:
// the response for OK, a google.rpc.Status (code, message, details)
// otherwise. The handler's headers and trailers a door records (its
// RecordMetadata option, checked by [NewMetadataKeys]) are in Header too,
// each key under [HeaderPrefix] or [TrailerPrefix].
package idemproto

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
)

// Status codes, as numbered by gRPC and Connect.
const (
	OK                 = 0
	Canceled           = 1
	Unknown            = 2
	InvalidArgument    = 3
	DeadlineExceeded   = 4
	NotFound           = 5
	AlreadyExists      = 6
	PermissionDenied   = 7
	ResourceExhausted  = 8
	FailedPrecondition = 9
	Aborted            = 10
	OutOfRange         = 11
	Unimplemented      = 12
	Internal           = 13
	Unavailable        = 14
	DataLoss           = 15
	Unauthenticated    = 16
)

// KeyHeader is the request header (gRPC metadata) that carries the
// idempotency key, and ReplayedHeader the response header set, to "true",
// on a replayed answer.
const (
	KeyHeader      = "idempotency-key"
	ReplayedHeader = "idempotent-replayed"
)

// TypeHeader is the [idem.Result] header that names the full type of the
// recorded message.
const TypeHeader = "Proto-Type"

// HeaderPrefix and TrailerPrefix prefix, in an [idem.Result]'s Header, the
// key of each recorded header and trailer of the handler's.
const (
	HeaderPrefix  = "Proto-Header-"
	TrailerPrefix = "Proto-Trailer-"
)

// Metadata is a call's headers and trailers (gRPC metadata; for Connect,
// HTTP headers and trailers, or an error's metadata), keys in lower case.
type Metadata struct {
	Header  map[string][]string
	Trailer map[string][]string
}

// MetadataKeys are the keys of the handler's headers and trailers a door
// records with an answer and replays to every retry: its RecordMetadata
// option, checked. The zero value records none.
type MetadataKeys struct {
	keys map[string]bool // lower case
}

// neverRecorded are the keys no door records: idem's own, the protocols'
// reserved and framing headers (grpc-* and connect-* are reserved by
// prefix), the hop-by-hop headers of HTTP/1.1 (RFC 9110 §7.6.1), and
// credentials and session state that belong to the first caller.
var neverRecorded = map[string]bool{
	KeyHeader:             true,
	ReplayedHeader:        true,
	"content-type":        true,
	"content-length":      true,
	"content-encoding":    true,
	"accept-encoding":     true,
	"te":                  true,
	"trailer":             true,
	"transfer-encoding":   true,
	"connection":          true,
	"keep-alive":          true,
	"proxy-connection":    true,
	"upgrade":             true,
	"date":                true,
	"set-cookie":          true,
	"set-cookie2":         true,
	"authorization":       true,
	"proxy-authorization": true,
	"proxy-authenticate":  true,
}

// NewMetadataKeys checks keys, a door's RecordMetadata, and returns them.
// It panics, naming adapter, on a key that is empty, has a character a
// gRPC metadata key cannot have (one of 0-9 a-z - _ . after lower-casing),
// or is never recorded: idempotency-key, idempotent-replayed, grpc-* and
// connect-*, content-type and the other framing and hop-by-hop headers
// (content-length, content-encoding, accept-encoding, te, trailer,
// transfer-encoding, connection, keep-alive, proxy-connection, upgrade,
// date), set-cookie, set-cookie2, authorization, proxy-authorization and
// proxy-authenticate.
func NewMetadataKeys(adapter string, keys []string) MetadataKeys {
	if len(keys) == 0 {
		return MetadataKeys{}
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		key := strings.ToLower(k)
		if key == "" || strings.Trim(key, "0123456789abcdefghijklmnopqrstuvwxyz-_.") != "" {
			panic(fmt.Sprintf("%s: Options.RecordMetadata holds %q, which is not a metadata key", adapter, k))
		}
		if neverRecorded[key] || strings.HasPrefix(key, "grpc-") || strings.HasPrefix(key, "connect-") {
			panic(fmt.Sprintf("%s: Options.RecordMetadata lists %s, which is never recorded", adapter, k))
		}
		set[key] = true
	}
	return MetadataKeys{set}
}

// Empty reports whether k records no key.
func (k MetadataKeys) Empty() bool { return len(k.keys) == 0 }

// Keep returns what of header and trailer (any case of keys) k records,
// keys in lower case; the values are copied.
func (k MetadataKeys) Keep(header, trailer map[string][]string) Metadata {
	if k.Empty() {
		return Metadata{}
	}
	return Metadata{Header: k.keep(header), Trailer: k.keep(trailer)}
}

func (k MetadataKeys) keep(h map[string][]string) map[string][]string {
	var out map[string][]string
	for name, vs := range h {
		if len(vs) == 0 {
			continue
		}
		key := strings.ToLower(name)
		if !k.keys[key] {
			continue
		}
		if out == nil {
			out = make(map[string][]string)
		}
		out[key] = append(out[key], vs...)
	}
	return out
}

// Recorded is the default policy of which status codes are recorded: OK,
// and the codes that say the request itself cannot succeed, which a retry
// of the same request meets again (InvalidArgument, NotFound,
// AlreadyExists, FailedPrecondition, OutOfRange, Unimplemented). Any other
// code, transient or unknown, releases the key, so a retry runs the call
// again.
func Recorded(code uint32) bool {
	switch code {
	case OK, InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, OutOfRange, Unimplemented:
		return true
	}
	return false
}

// Fingerprint returns the fingerprint of a call to procedure (the full
// method, "/package.Service/Method") with req: a later call with its key
// and another procedure or another request is refused, and runs nothing.
// The request's encoding is deterministic (map entries sorted), so equal
// requests give equal fingerprints within one build of their types; an
// unknown field a client sends is part of it.
func Fingerprint(procedure string, req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", fmt.Errorf("idemproto: the request of %s is a %T, not a proto message", procedure, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("idemproto: encoding the request of %s: %w", procedure, err)
	}
	return idemcall.Fingerprint([]byte(procedure), b), nil
}

// Message returns the result that records msg, a call's OK response,
// with md, the handler's recorded headers and trailers.
func Message(msg any, md Metadata) (idem.Result, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return idem.Result{}, fmt.Errorf("idemproto: the response is a %T, not a proto message", msg)
	}
	return encode(OK, m, md)
}

// Status returns the result that records st, a call's error status, with
// md, the handler's recorded headers and trailers (for Connect, the
// error's metadata).
func Status(st *spb.Status, md Metadata) (idem.Result, error) {
	return encode(uint32(st.GetCode()), st, md)
}

func encode(code uint32, m proto.Message, md Metadata) (idem.Result, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return idem.Result{}, fmt.Errorf("idemproto: encoding the answer: %w", err)
	}
	header := make(map[string][]string, 1+len(md.Header)+len(md.Trailer))
	header[TypeHeader] = []string{string(m.ProtoReflect().Descriptor().FullName())}
	put := func(prefix string, kv map[string][]string) {
		for k, vs := range kv {
			if len(vs) > 0 {
				header[textproto.CanonicalMIMEHeaderKey(prefix+k)] = vs
			}
		}
	}
	put(HeaderPrefix, md.Header)
	put(TrailerPrefix, md.Trailer)
	return idem.Result{Status: int(code), Header: header, Body: b}, nil
}

// Resolver finds the message type of a recorded response by its full name.
// protoregistry.GlobalTypes, where generated code registers its messages,
// is one.
type Resolver interface {
	FindMessageByName(protoreflect.FullName) (protoreflect.MessageType, error)
}

var _ Resolver = protoregistry.GlobalTypes

// Decode returns what res records: the response message (st nil) or the
// error status (msg nil), and the handler's recorded headers and trailers
// (empty for a result recorded without them). types finds the response's
// type; nil means protoregistry.GlobalTypes.
func Decode(res idem.Result, types Resolver) (msg proto.Message, st *spb.Status, md Metadata, err error) {
	if types == nil {
		types = protoregistry.GlobalTypes
	}
	md = decodeMetadata(res.Header)
	name := ""
	if v := res.Header[TypeHeader]; len(v) == 1 {
		name = v[0]
	}
	if res.Status != OK {
		st = &spb.Status{}
		if err := proto.Unmarshal(res.Body, st); err != nil {
			return nil, nil, Metadata{}, fmt.Errorf("idemproto: decoding a recorded status: %w", err)
		}
		return nil, st, md, nil
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return nil, nil, Metadata{}, fmt.Errorf("idemproto: the recorded response's type %q: %w", name, err)
	}
	msg = mt.New().Interface()
	if err := proto.Unmarshal(res.Body, msg); err != nil {
		return nil, nil, Metadata{}, fmt.Errorf("idemproto: decoding a recorded %s: %w", name, err)
	}
	return msg, nil, md, nil
}

// decodeMetadata is the metadata recorded in h, under [HeaderPrefix] and
// [TrailerPrefix], with lower-case keys.
func decodeMetadata(h map[string][]string) Metadata {
	var md Metadata
	add := func(into map[string][]string, key string, vs []string) map[string][]string {
		if into == nil {
			into = make(map[string][]string)
		}
		into[strings.ToLower(key)] = vs
		return into
	}
	for name, vs := range h {
		if len(vs) == 0 {
			continue
		}
		if key, ok := strings.CutPrefix(name, HeaderPrefix); ok && key != "" {
			md.Header = add(md.Header, key, vs)
		} else if key, ok := strings.CutPrefix(name, TrailerPrefix); ok && key != "" {
			md.Trailer = add(md.Trailer, key, vs)
		}
	}
	return md
}

// Refusal is how a door answers a call it did not run and has no recorded
// answer for: the status code, a message for the client, and, for a code a
// retry may clear, the delay to suggest (zero otherwise).
type Refusal struct {
	Code       uint32
	Message    string
	RetryAfter time.Duration
}

// Refuse maps err, an error of [idemcall.Caller.DoResult] that is not the
// call's own, to the status the door answers with: in flight, Aborted (a
// retry after the delay gets the answer); a key reused for another
// request, FailedPrecondition; an invalid key, InvalidArgument; the store
// unavailable or a transaction that did not commit, Unavailable (a retry
// with the key tells whether it took effect); a transaction the database
// ended at one of its bounds, Internal; a key completed without a
// replayable answer, FailedPrecondition. ok is false for any other error:
// the call's own, which the door returns as it is.
func Refuse(err error) (r Refusal, ok bool) {
	var (
		inFlight    *idemcall.InFlightError
		unavailable *idemcall.UnavailableError
		commit      *idemcall.CommitError
	)
	switch {
	case errors.As(err, &inFlight):
		return Refusal{Aborted, "a call with this idempotency key is in flight; retry later with the same key", inFlight.RetryAfter}, true
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return Refusal{Code: FailedPrecondition, Message: "the idempotency key was used for a different request (another method or request message); use a new key for a new request"}, true
	case errors.Is(err, idem.ErrInvalidKey):
		return Refusal{Code: InvalidArgument, Message: "invalid idempotency key: " + err.Error()}, true
	case errors.As(err, &unavailable):
		return Refusal{Unavailable, unavailableMessage(unavailable.Err), unavailable.RetryAfter}, true
	case errors.As(err, &commit) && commit.Limit != nil:
		return Refusal{Code: Internal, Message: "the call's transaction did not commit: the database ended it at one of its bounds; nothing of it took effect"}, true
	case errors.As(err, &commit):
		return Refusal{Unavailable, "the call's transaction did not commit, or the outcome of its commit is unknown; retry with the same key: it gets the answer if it committed, and runs again if not", time.Second}, true
	case errors.Is(err, idemcall.ErrUnreplayable):
		return Refusal{Code: FailedPrecondition, Message: "the call with this idempotency key ran, and its answer cannot be replayed"}, true
	}
	return Refusal{}, false
}

// Outcome is how [Serve] ended for a door: the handler ran (Ran; the door
// answers with the handler's own response or error), or a retry gets the
// recorded answer, Msg or Status, with the recorded Metadata.
type Outcome struct {
	Ran      bool
	Msg      proto.Message
	Status   *spb.Status
	Metadata Metadata
}

// Serve runs a door's handler once for call through caller: handle runs
// it and returns its response message, the metadata to record with its
// answer (the door's [MetadataKeys] of what the handler set) and its
// error; statusOf reads a handler's error as a google.rpc.Status; record
// says which codes are recorded (one that is not releases the key). It
// returns the [Outcome], or the error of a call that did not run and has
// no recorded answer (answer it with [Refuse]'s status, or as a context's
// error).
func Serve(ctx context.Context, caller *idemcall.Caller, call idemcall.Call, record func(code uint32) bool, types Resolver,
	statusOf func(error) *spb.Status, handle func(ctx context.Context) (any, Metadata, error)) (Outcome, error) {
	ran := false
	res, replayed, err := caller.DoResult(ctx, call, func(ctx context.Context) (idem.Result, error) {
		msg, md, herr := handle(ctx)
		ran = true
		if herr == nil {
			if !record(OK) {
				return idem.Result{}, errNotRecorded
			}
			return Message(msg, md)
		}
		st := statusOf(herr)
		if !record(uint32(st.GetCode())) {
			return idem.Result{}, errNotRecorded
		}
		return Status(st, md)
	})
	switch {
	case ran && (err == nil || err == errNotRecorded):
		return Outcome{Ran: true}, nil
	case err != nil:
		return Outcome{}, err
	case !replayed:
		return Outcome{Ran: true}, nil
	}
	msg, st, md, err := Decode(res, types)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Msg: msg, Status: st, Metadata: md}, nil
}

// unavailableMessage is the message of a call that did not run and may be
// retried: the store failed, the server is shutting down, or the call's
// claim ended before it began (its lease or MaxExecution ran out). It
// names no store error, whose text may carry the database's address.
func unavailableMessage(cause error) string {
	switch {
	case errors.Is(cause, engine.ErrShutdown):
		return "the server is shutting down; the call did not run; retry later with the same key"
	case errors.Is(cause, idem.ErrLeaseLost), errors.Is(cause, engine.ErrExecutionTimeout):
		return "the call's claim ended before it began; the call did not run; retry later with the same key"
	}
	return "the idempotency store is unavailable; the call did not run; retry later with the same key"
}

// errNotRecorded releases the key of a call whose code is not recorded:
// the door answers with the handler's own error.
var errNotRecorded = errors.New("idemproto: code not recorded")

// NewCaller is the caller a door's constructor builds over store: its
// events name adapter (the door's package) unless opts.Engine.Adapter
// already names one. It panics, naming adapter, when the door has no
// principal function (hasPrincipal false): a door's keys are scoped by
// the caller, and without one every caller would share them.
func NewCaller(store idem.Store, adapter string, hasPrincipal bool, opts idemcall.Options) *idemcall.Caller {
	if !hasPrincipal {
		panic(adapter + ": Options.Principal is nil; it names the caller whose keys a call's key is among")
	}
	if opts.Engine.Adapter == "" {
		opts.Engine.Adapter = adapter
	}
	return idemcall.New(store, opts)
}

// Labels are the labels a door's claim stores for a call to procedure
// (the full method, "/package.Service/Method") by principal: the
// procedure as its route, the principal as its caller. Method is empty:
// an RPC has no method of its own besides its procedure.
func Labels(procedure, principal string) idem.Labels {
	return idem.Labels{Route: procedure, Caller: principal}
}
