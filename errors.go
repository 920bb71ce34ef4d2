package idem

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers branch on them with [errors.Is]; the typed errors
// below carry details and match their sentinel.
var (
	// ErrStaleClaim: a token whose generation is no longer the key's current
	// claim was used to complete, renew or release. Nothing was changed.
	ErrStaleClaim = errors.New("idem: stale claim")

	// ErrFingerprintMismatch: the key is claimed or completed for a different
	// request (a different fingerprint). Nothing was changed.
	ErrFingerprintMismatch = errors.New("idem: key reused for a different request")

	// ErrCapacity: a bounded store is full of live claims and retained
	// results (it never evicts a retained result to make room) and cannot
	// take a new key. The key was not claimed; retry later, when results
	// have expired or claims ended.
	ErrCapacity = errors.New("idem: store capacity exhausted")

	// ErrLiveClaim: an operator's forget (pgstore's and memstore's Forget)
	// was refused because a claim whose lease has not run out holds the
	// key: its holder is presumably still running the side effect, and
	// forgetting the key would let a retry run it a second time. Nothing
	// was changed; force the forget to remove it anyway.
	ErrLiveClaim = errors.New("idem: key holds a live claim")

	// ErrUnavailable: the store could not be reached or did not answer. The
	// operation may or may not have taken effect; a claim that was not
	// confirmed must be treated as not held.
	ErrUnavailable = errors.New("idem: store unavailable")

	// ErrInvalidKey: a key or scope is malformed or too long.
	ErrInvalidKey = errors.New("idem: invalid key")
)

// StaleClaimError reports a token that no longer holds its key: the claim was
// released, swept, taken over after its lease ran out, or already completed.
// It matches [ErrStaleClaim].
type StaleClaimError struct {
	Token Token
	// Current is the key's current generation, or zero when the key is
	// absent or the store does not know it.
	Current int64
}

// Error names the key by its digest ([KeyDigest]), never in clear: errors
// end up in logs, and keys carry client data.
func (e *StaleClaimError) Error() string {
	digest := KeyDigest(e.Token.Scope, e.Token.Key)
	if e.Current == 0 {
		return fmt.Sprintf("idem: stale claim: generation %d of key %s no longer holds the key", e.Token.Generation, digest)
	}
	return fmt.Sprintf("idem: stale claim: generation %d of key %s, current generation %d", e.Token.Generation, digest, e.Current)
}

// Is reports whether target is [ErrStaleClaim].
func (e *StaleClaimError) Is(target error) bool { return target == ErrStaleClaim }

// MismatchError reports a key reused for a request with another fingerprint.
// It matches [ErrFingerprintMismatch].
type MismatchError struct {
	Scope string
	Key   Key
	// Completed reports whether the key holds a result (true) or a live
	// claim (false).
	Completed bool
}

// Error names the key by its digest ([KeyDigest]), never in clear.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("idem: key %s reused for a different request", KeyDigest(e.Scope, e.Key))
}

// Is reports whether target is [ErrFingerprintMismatch].
func (e *MismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

// InvalidKeyError reports a malformed key or scope. It matches
// [ErrInvalidKey].
type InvalidKeyError struct {
	Reason string
}

func (e *InvalidKeyError) Error() string { return "idem: invalid key: " + e.Reason }

// Is reports whether target is [ErrInvalidKey].
func (e *InvalidKeyError) Is(target error) bool { return target == ErrInvalidKey }

// UnavailableError wraps the cause of a store failure. It matches
// [ErrUnavailable] and unwraps to the cause.
type UnavailableError struct {
	// Op is the store operation that failed: "claim", "complete", ...
	Op  string
	Err error
	// RetryAfter is a hint for how long to wait before retrying; zero when
	// the store has none.
	RetryAfter time.Duration
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("idem: store unavailable during %s: %v", e.Op, e.Err)
}

// Is reports whether target is [ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// ErrLeaseLost is the cause ([context.Cause]) with which the adapters cancel
// the context of protected work whose claim can no longer be trusted: the
// lease was about to run out without a confirmed renewal (a renewal failed
// or hung), or a renewal found the claim taken over or forgotten. The work
// should stop and start no further side effects, and answer a failure. A
// whole answer it still returns is recorded only if no other request took
// the key over (the completion is fenced by the claim's generation).
var ErrLeaseLost = errors.New("idem: claim lost while the work ran")
