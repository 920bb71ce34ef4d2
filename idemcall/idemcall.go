// Package idemcall runs a function once per idempotency key: the door to
// the engine for work that is not an HTTP request, such as a cron job, a
// CLI command, a workflow step, a queue consumer, or another adapter (the
// gRPC and Connect interceptors stand on it).
//
// [Do] claims the key, runs the function under the claim (the lease
// renewed while it runs), records what it returned as an [idem.Result]
// (encoded by the [Caller]'s [Codec], JSON by default), and gives that
// recorded value to every later call with the same key, decoded, without
// running the function again. A call whose key another call still holds
// waits up to the engine's Wait for its result, then fails with an
// [*InFlightError]; a key used with another input fails with an error that
// matches [idem.ErrFingerprintMismatch]. A function that returns an error
// records nothing: its key is released, and a later call runs it again.
//
// Two paths, chosen by [Options].InTransaction, as in the HTTP and MCP
// adapters:
//
//   - Two-phase (the default): the claim commits on its own, the function
//     runs, then its result is recorded. Any effect fits: a database of its
//     own, an outgoing request, a file. An effect outside the store's
//     database runs at most once per lease window (a process that stops
//     mid-call leaves its claim to run out; a later call then runs it
//     again), so forward the key to the service that does it, when it
//     takes one.
//   - In a transaction: the claim is taken in a transaction of the store's
//     database ([idem.TxStore], such as pgstore), the function writes its
//     rows through that transaction (pgstore.TxFrom(ctx)), and the rows and
//     the recorded result commit together, or not at all. Do returns the
//     value only once it committed.
package idemcall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

// AdapterName is the adapter name in every [idem.Event] of a [Caller] whose
// Options.Engine.Adapter is empty.
const AdapterName = "idemcall"

// Codec encodes the values a function returns into the bytes recorded for
// its key, and decodes them back for a later call. encoding/json's
// functions have its shape.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: encoding/json.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Options configures a [Caller].
type Options struct {
	// Engine holds the engine's settings: lease, Wait (how long a call
	// waits for one in flight with its key; zero: not at all, it fails at
	// once with an [*InFlightError]), timeouts, shutdown, logger. Its
	// Adapter names the events; empty means [AdapterName]. Invalid values
	// panic in [New], as in [engine.New].
	Engine engine.Options

	// InTransaction runs each function inside the transaction its key is
	// claimed in, so that its rows (written through the transaction the
	// store puts in its context, pgstore.TxFrom) and the recorded result
	// commit together. It needs a store that is an [idem.TxStore]; [New]
	// panics otherwise. False means the two-phase path.
	InTransaction bool

	// Codec encodes the values [Do] records. Nil means [JSON].
	Codec Codec

	// Observe, when not nil, receives each [idem.Event] of every call. It
	// must be fast and safe for concurrent use.
	Observe func(idem.Event)
}

// Caller runs functions once per key over one store. It is safe for
// concurrent use; make one per store and share it.
type Caller struct {
	eng     *engine.Engine
	adapter string
	inTx    bool
	codec   Codec
	observe func(idem.Event)
}

// New returns a Caller over store. It panics if store is nil, if
// Options.InTransaction is set and store is not an [idem.TxStore], or if
// Options.Engine is invalid.
func New(store idem.Store, opts Options) *Caller {
	if store == nil {
		panic("idemcall: New with a nil store")
	}
	if _, ok := store.(idem.TxStore); opts.InTransaction && !ok {
		panic(fmt.Sprintf("idemcall: Options.InTransaction needs a store that is an idem.TxStore; %T is not", store))
	}
	if opts.Engine.Adapter == "" {
		opts.Engine.Adapter = AdapterName
	}
	if opts.Codec == nil {
		opts.Codec = JSON
	}
	return &Caller{eng: engine.New(store, opts.Engine), adapter: opts.Engine.Adapter, inTx: opts.InTransaction, codec: opts.Codec, observe: opts.Observe}
}

// Call names one call: the key it runs once under, in a scope, and what
// identifies its input.
type Call struct {
	// Scope separates keys of different owners (a tenant, a user, a job
	// name): the same key in two scopes is two calls. Empty is a scope
	// like any other.
	Scope string
	// Key is the idempotency key: 1 to [idem.MaxHeaderKeyLen] printable
	// ASCII characters ([idem.ParseClientKey]); anything else fails the call
	// with an error that matches [idem.ErrInvalidKey].
	Key string
	// Fingerprint identifies the call's input: a later call with the same
	// key and another fingerprint fails with an error that matches
	// [idem.ErrFingerprintMismatch], and runs nothing. Empty means the key
	// alone identifies the call. [Fingerprint] makes one from the input.
	Fingerprint string
	// Labels are stored with the claim, for operators (idem inspect, idem
	// keys): what was called, and by whom, in words that are not secrets.
	// The zero value stores none.
	Labels idem.Labels
}

// Fingerprint returns a fingerprint for a [Call] from the parts of its
// input: their SHA-256, each part length-prefixed so that no two lists of
// parts give the same bytes.
func Fingerprint(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		l := uint64(len(p))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Errors of a call that did not run its function and has no recorded
// value to give.
var (
	// ErrInFlight: another call holds the key, and did not finish within
	// the engine's Wait. It is an [*InFlightError].
	ErrInFlight = errors.New("idemcall: a call with this key is in flight")
	// ErrUnreplayable: the key completed without a result that can be
	// replayed (a store recorded it so); the work ran, and will not run
	// again under this key.
	ErrUnreplayable = errors.New("idemcall: the key completed without a replayable result")
	// ErrNotCommitted: on the in-transaction path, the function returned
	// but its transaction did not commit, or the outcome of the commit is
	// unknown (the connection was lost during it). It is a [*CommitError].
	// Nothing is known to have taken effect: a later call with the key
	// gets the value if it did commit, and runs the function again if not.
	ErrNotCommitted = errors.New("idemcall: the call's transaction did not commit")
)

// InFlightError reports a key held by another call. It matches
// [ErrInFlight].
type InFlightError struct {
	// RetryAfter is when a retry may find the call finished: the holder's
	// lease end when the store knows it.
	RetryAfter time.Duration
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("%v; retry after %v", ErrInFlight, e.RetryAfter)
}

// Is reports whether target is [ErrInFlight].
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// UnavailableError reports a call that could not claim its key: the store
// failed, or the engine's Shutdown is done (Err is then
// [engine.ErrShutdown]); or a call whose claim's context ended before its
// function began (Err is the cause, such as [idem.ErrLeaseLost] for a
// claim answered after its lease ran out). The function did not run. It
// matches [idem.ErrUnavailable] and unwraps to Err.
type UnavailableError struct {
	Err        error
	RetryAfter time.Duration
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("idemcall: the call did not run (%v); retry after %v", e.Err, e.RetryAfter)
}

// Is reports whether target is [idem.ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == idem.ErrUnavailable }

// Unwrap returns Err.
func (e *UnavailableError) Unwrap() error { return e.Err }

// CommitError reports an in-transaction call whose transaction did not
// commit. It matches [ErrNotCommitted]. Limit, when not nil, is the bound
// at which the database ended the transaction (a retry that takes as long
// meets it again; [engine.ExplainTxLimit] says which setting to raise).
type CommitError struct {
	Limit *idem.TxLimitError
}

func (e *CommitError) Error() string {
	if e.Limit != nil {
		return ErrNotCommitted.Error() + ": " + engine.ExplainTxLimit(e.Limit)
	}
	return ErrNotCommitted.Error() + ", or the outcome of its commit is unknown"
}

// Is reports whether target is [ErrNotCommitted].
func (e *CommitError) Is(target error) bool { return target == ErrNotCommitted }

// Unwrap returns Limit, when there is one.
func (e *CommitError) Unwrap() error {
	if e.Limit == nil {
		return nil
	}
	return e.Limit
}

// Do runs fn once for call's key and returns its value, or the value
// recorded for the key by an earlier call, decoded with the Caller's
// codec; replayed reports which. fn runs on a context the engine controls:
// it keeps ctx's values and deadline, ends before the claim's lease could
// run out, and, on the in-transaction path, carries the claim's
// transaction; it ends with ctx's cancellation only with
// Options.Engine.CancelWithClient, so by default a caller that gives up
// still has fn run to completion and recorded, for its retry. An error
// from fn is returned as it is, and nothing is recorded: a later call runs
// fn again. To record a failure that must not run again, return it as part
// of T.
func Do[T any](ctx context.Context, c *Caller, call Call, fn func(ctx context.Context) (T, error)) (v T, replayed bool, err error) {
	var ran bool
	res, replayed, err := c.DoResult(ctx, call, func(ctx context.Context) (idem.Result, error) {
		out, err := fn(ctx)
		if err != nil {
			return idem.Result{}, err
		}
		body, err := c.codec.Marshal(out)
		if err != nil {
			// Nothing is recorded, but the effect happened: say so.
			return idem.Result{}, fmt.Errorf("idemcall: encoding the value of a call that ran (its key is released, so a later call runs it again): %w", err)
		}
		v, ran = out, true
		return idem.Result{Body: body}, nil
	})
	if err != nil || ran {
		return v, replayed, err
	}
	if err := c.codec.Unmarshal(res.Body, &v); err != nil {
		return v, true, fmt.Errorf("idemcall: decoding the value recorded for the key: %w", err)
	}
	return v, true, nil
}

// DoResult is [Do] for a caller that encodes its own [idem.Result], such
// as an adapter with a wire format of its own: fn's result is recorded as
// it is, and a later call gets it back with replayed true. A result fn
// returns with Unreplayable set completes the key without a value to give.
func (c *Caller) DoResult(ctx context.Context, call Call, fn func(ctx context.Context) (idem.Result, error)) (res idem.Result, replayed bool, err error) {
	key, err := idem.ParseClientKey(call.Key)
	if err != nil {
		c.Report(idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey, Scope: call.Scope})
		return idem.Result{}, false, err
	}
	req := &engine.Request{
		Claim:         idem.ClaimRequest{Scope: call.Scope, Key: key, Fingerprint: call.Fingerprint, Labels: call.Labels},
		Observe:       c.observe,
		InTransaction: c.inTx,
	}
	d := c.eng.Claim(ctx, req)
	switch d.Outcome {
	case engine.Run:
	case engine.Replay:
		if d.Claim.Result.Unreplayable {
			return idem.Result{}, true, ErrUnreplayable
		}
		return d.Claim.Result, true, nil
	case engine.InFlight:
		return idem.Result{}, false, &InFlightError{RetryAfter: d.RetryAfter}
	case engine.Mismatch, engine.InvalidKey:
		return idem.Result{}, false, d.Err
	case engine.RequestEnded:
		return idem.Result{}, false, context.Cause(ctx)
	default: // Unavailable
		return idem.Result{}, false, &UnavailableError{Err: d.Err, RetryAfter: d.RetryAfter}
	}
	x := c.eng.Start(ctx, req, d)
	if cause := x.Err(); cause != nil {
		// The work's context ended before fn began (the claim's answer
		// came after its lease ran out, the deadline passed, ctx ended
		// with CancelWithClient): the key may be another call's already,
		// and a function that does not check its context would run its
		// effect anyway.
		x.Finish(engine.Verdict{Action: engine.Release, Why: "the work's context ended before the function was called: " + cause.Error()})
		return idem.Result{}, false, &UnavailableError{Err: cause, RetryAfter: c.eng.RetryAfter()}
	}
	x.Do(func(ctx context.Context) engine.Verdict {
		res, err = fn(ctx)
		if err != nil {
			return engine.Verdict{Action: engine.Release, Why: "the function failed: " + err.Error()}
		}
		return engine.Verdict{Action: engine.Complete, Result: res}
	}, nil)
	if err == nil && x.InTransaction() && !x.Committed() {
		return idem.Result{}, false, &CommitError{Limit: x.TxLimitErr()}
	}
	return res, false, err
}

// Report reports e, a call answered without the engine (refused before a
// claim, or run unprotected), to Options.Observe, with the Caller's
// adapter name. A door on the Caller reports its own refusals with it, as
// the HTTP adapters do theirs.
func (c *Caller) Report(e idem.Event) {
	if c.observe == nil {
		return
	}
	e.Adapter = c.adapter
	c.observe(e)
}
