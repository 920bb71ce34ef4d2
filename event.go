package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"
)

// EventKind says what happened to a protected request. The adapters
// (middleware, mcphttp) report events to an observer, for metrics.
type EventKind int

// Event kinds, in roughly the order a request meets them.
const (
	// EventClaimed: the request claimed its key; the side effect runs.
	// Duration is the claim's latency (including any wait).
	EventClaimed EventKind = iota + 1
	// EventReplayed: the key was completed; the recorded result was
	// replayed (or, if unreplayable, the documented error answered).
	// Duration is the claim's latency (including any wait).
	EventReplayed
	// EventInFlight: another request still held the key after the wait;
	// the request was told to retry. Duration is the time spent claiming
	// and waiting.
	EventInFlight
	// EventMismatch: the key was used for a different request; it was
	// refused without running.
	EventMismatch
	// EventCompleted: the result was recorded just now, by this call (a
	// replay of an earlier one is [EventReplayed]). Duration is the run time
	// of the side effect. Status is the recorded status.
	EventCompleted
	// EventReleased: the key was released (a panic, a failure the policy
	// does not record, work cut off by shutdown or a lost lease, a claim's
	// transaction the database ended), so a retry runs again. Duration is
	// the run time. Err holds the cause when the work was cut off
	// (engine.ErrShutdown, ErrLeaseLost), or a [*TxLimitError] when the
	// database ended the work's transaction at one of its bounds.
	EventReleased
	// EventStale: completing or releasing found the claim no longer the
	// request's (its lease ran out and another request took the key over,
	// or an operator forgot it); its result is not recorded. A claim lost
	// while the work still ran is reported as EventLeaseLost instead.
	EventStale
	// EventStoreError: a store call failed. Op names it ("claim", "renew",
	// "complete", "release"); Err holds the error.
	EventStoreError
	// EventLeaseLost: the work's claim could no longer be trusted while it
	// ran, so its context was cancelled with cause [ErrLeaseLost]: the
	// lease was about to run out without a confirmed renewal (renewals
	// failed or hung), or a renewal found the claim stale. Nothing the
	// work answers is recorded. Err holds the reason; Duration is how
	// long the work had run. Reported once per request, from the
	// renewal's goroutine.
	EventLeaseLost
	// EventRejected: the protected handler's own checks (origin,
	// authentication, protocol headers, session) refused a request that
	// the adapter would otherwise have answered from the store; the client
	// got that refusal. Status is its HTTP status.
	EventRejected
	// EventLeft: the work ended with an answer that is neither a result
	// nor a failure (an MCP stream that ended before the call's response:
	// the tool may still run), so its claim was left, unrenewed, to its
	// lease: until the lease runs out a retry waits or is told to retry,
	// then it runs. This process no longer holds the claim. Duration is
	// the run time.
	EventLeft
	// EventKeyRotated: the same caller sent the same call (the same tool
	// and canonical arguments) again under a new idempotency key, within
	// the window of mcphttp's NewKeyGuard: an agent that mints a key per
	// retry, or a caller who means a second, identical call. Reported
	// only when the guard is on, whatever it then does.
	EventKeyRotated
	// EventRefused: the adapter answered the request itself, instead of
	// the handler, because it cannot be deduplicated as sent: Reason says
	// why (one of the Refused* reasons), Status is the HTTP status the
	// adapter answered with (zero when the engine reports it, a key the
	// store rejected, and from an RPC door, which answers with a status
	// code). The handler did not run. Scope and Key are empty
	// when the request got no further than them.
	EventRefused
	// EventUnprotected: the request ran without deduplication: Reason
	// says why ([UnprotectedNoKey], [UnprotectedFailOpen]). A retry of it
	// runs again.
	EventUnprotected
)

// The reasons of an [EventRefused] (Event.Reason): what was wrong with the
// request the adapter refused.
const (
	// RefusedMissingKey: a request that must carry a key carried none
	// (the middleware, 400).
	RefusedMissingKey = "missing_key"
	// RefusedInvalidKey: the key is not a valid key (empty, too long, not
	// printable, two that disagree), or the store rejected it (400; a
	// JSON-RPC error in mcphttp).
	RefusedInvalidKey = "invalid_key"
	// RefusedBodyTooLarge: the body is larger than the adapter records
	// (the middleware's MaxBodyBytes, 413).
	RefusedBodyTooLarge = "body_too_large"
	// RefusedBodyUnreadable: the body could not be read (400).
	RefusedBodyUnreadable = "body_unreadable"
	// RefusedUnscopedCookies: the request carries cookies but no
	// credential the adapter knows, and the service has not named its
	// session cookies: whose request it is cannot be told (500).
	RefusedUnscopedCookies = "unscoped_cookies"
	// RefusedInvalidRequest: the JSON-RPC envelope cannot be deduplicated
	// (an id that is not a string or a safe integer, a repeated member;
	// mcphttp, 400).
	RefusedInvalidRequest = "invalid_request"
)

// The reasons of an [EventUnprotected] (Event.Reason).
const (
	// UnprotectedNoKey: a request without a key ran unprotected, as
	// configured (the middleware's KeyOptional; an MCP call with neither
	// an idempotency key nor a session to key it by).
	UnprotectedNoKey = "no_key"
	// UnprotectedFailOpen: the store failed, and the request ran
	// unprotected (the middleware's FailOpen).
	UnprotectedFailOpen = "fail_open"
)

func (k EventKind) String() string {
	switch k {
	case EventClaimed:
		return "claimed"
	case EventReplayed:
		return "replayed"
	case EventInFlight:
		return "in flight"
	case EventMismatch:
		return "mismatch"
	case EventCompleted:
		return "completed"
	case EventReleased:
		return "released"
	case EventStale:
		return "stale"
	case EventStoreError:
		return "store error"
	case EventLeaseLost:
		return "lease lost"
	case EventRejected:
		return "rejected"
	case EventLeft:
		return "left"
	case EventKeyRotated:
		return "key rotated"
	case EventRefused:
		return "refused"
	case EventUnprotected:
		return "unprotected"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event describes something that happened to a protected request.
type Event struct {
	Kind EventKind
	// Scope and Key identify the request's key. They may carry client
	// data: hash them (see [KeyDigest]) before using them as labels.
	Scope string
	Key   Key
	// Status is the response's HTTP status, when there is one.
	Status int
	// Duration is documented per [EventKind]; zero when none applies.
	Duration time.Duration
	// Op is the store operation of an EventStoreError.
	Op string
	// Err is the error of an EventStoreError, EventStale or
	// EventLeaseLost, and the cause of an EventReleased of cut-off work.
	Err error
	// Adapter names the adapter that reported the event, as the adapter
	// names itself: "http" for middleware (middleware.AdapterName), "mcp"
	// for mcphttp (mcphttp.AdapterName), a third-party adapter its own name
	// (engine.Options.Adapter). Empty when the reporter does not say.
	Adapter string
	// Waited is how much of a claim's Duration was spent waiting for an
	// in-flight duplicate to finish (EventClaimed, EventReplayed,
	// EventInFlight). Zero when the first claim answered.
	Waited time.Duration
	// Takeover reports, on EventClaimed, that the key was taken over from
	// a claim whose lease had run out (an owner crashed or stalled).
	Takeover bool
	// Reason says why, on EventRefused and EventUnprotected: one of the
	// Refused* or Unprotected* constants. Empty on the other kinds.
	Reason string
}

// KeyDigest is how a (scope, key) appears in logs (key_digest), spans
// (idem.key.digest), errors and the idem CLI: the first 16 hex digits of
// SHA-256 over scope, a NUL byte and key, enough to correlate log lines
// without disclosing a client's key or session. "idem digest" computes it
// from a key, and "idem inspect --digest" finds the key's row from it.
func KeyDigest(scope string, key Key) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key.s))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

// IsKeyDigest reports whether s has the form of a [KeyDigest]: 16
// lower-case hex digits.
func IsKeyDigest(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// LogValue logs a token as its key's digest and its generation, never the
// key in clear: keys carry client data (session ids, request ids).
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("key_digest", KeyDigest(t.Scope, t.Key)),
		slog.Int64("generation", t.Generation),
	)
}
