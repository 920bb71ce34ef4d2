package idem

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Token is proof that one caller, and only that caller, owns a key right now.
// It is the fencing token of a claim: stores refuse to complete, renew or
// release with a token whose generation is no longer current.
type Token struct {
	Scope string
	Key   Key
	// Generation is issued with the claim and never reused for the same
	// (scope, key). It is positive for every token a store issued.
	Generation int64
}

func (t Token) String() string {
	return fmt.Sprintf("%q %q gen %d", t.Scope, t.Key, t.Generation)
}

// ClaimRequest asks a store to claim a key.
type ClaimRequest struct {
	// Scope is who is asking: a tenant, a principal, a session. Keys in
	// different scopes never match. The empty scope is a scope like any other.
	Scope string
	// Key is what is being asked. The zero Key is rejected.
	Key Key
	// Fingerprint identifies the request (for example a hash of method, path
	// and body). A claim with a fingerprint other than the one stored fails
	// with a [*MismatchError]. Empty means "do not compare": an empty
	// fingerprint on either side matches anything.
	Fingerprint string
	// Lease is how long the claim is trusted without renewal. Zero means the
	// store's default lease.
	Lease time.Duration
	// Owner names the claimant (host, process) for operators. Optional.
	Owner string
	// Wait bounds how long the claim may wait in the store for a claim of
	// the key that is not committed yet: one taken inside another open
	// transaction ([TxStore.BeginClaim]), which nobody sees until that
	// transaction ends. If it commits, the claim answers as the committed
	// row says (a replay, say); if it rolls back, the claim goes on; if it
	// is still open when Wait runs out, the claim is InFlight with a zero
	// LeaseEnd. Zero or negative means as short a wait as the store can
	// make (a millisecond for pgstore). A store whose claims are seen as
	// soon as they are made (memstore) never waits, and ignores it.
	// [TxStore.BeginClaim] takes its wait from [TxLimits] instead;
	// [ClaimWait] sets it to what is left of its own wait.
	Wait time.Duration
	// Labels describe the request for operators, and are stored with a
	// claim the request makes; they never decide anything. The zero value
	// stores none.
	Labels Labels
}

// Labels describe the request that claimed a key, so that an operator who
// knows only a client's key can tell the rows of that key apart (idem
// inspect, idem keys). They are stored in clear: never a credential, a
// session id or a key. Each field is at most [MaxLabelLen] bytes; a store
// cuts a longer one.
type Labels struct {
	// Method is the request's method: the HTTP method ("POST"), or the MCP
	// method ("tools/call"). Empty: not recorded.
	Method string
	// Route is the endpoint the request was for: the route pattern
	// ("POST /payments/{id}" as an http.ServeMux matched it) or the
	// request's path, or an MCP call's tool name. Empty: not recorded.
	Route string
	// Caller names who sent the request, in a form that is not a secret:
	// the principal an application's Principal function returns (a user or
	// account id). Empty: not recorded.
	Caller string
}

// MaxLabelLen is the longest a [Labels] field is stored.
const MaxLabelLen = 200

// Clip returns l with each field cut to [MaxLabelLen] bytes, at a UTF-8
// character boundary.
func (l Labels) Clip() Labels {
	return Labels{Method: clipLabel(l.Method), Route: clipLabel(l.Route), Caller: clipLabel(l.Caller)}
}

func clipLabel(s string) string {
	if len(s) <= MaxLabelLen {
		return s
	}
	s = s[:MaxLabelLen]
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1] // part of a character cut in two
	}
	return s
}

// Validate reports whether a store may accept req: its key passes
// [Key.Validate] and its scope is at most [MaxScopeLen] bytes.
func (req ClaimRequest) Validate() error {
	if len(req.Scope) > MaxScopeLen {
		return &InvalidKeyError{Reason: fmt.Sprintf("scope is %d bytes, longer than %d", len(req.Scope), MaxScopeLen)}
	}
	return req.Key.Validate()
}

// Mismatches reports whether a key whose claim or result was recorded with
// fingerprint refuses req with a [*MismatchError]: both fingerprints are
// set and they differ. An empty fingerprint on either side matches
// anything.
func (req ClaimRequest) Mismatches(fingerprint string) bool {
	return fingerprint != "" && req.Fingerprint != "" && fingerprint != req.Fingerprint
}

// ClaimStatus is what a claim found.
type ClaimStatus int

const (
	// Acquired: the key is yours; execute, then complete or release.
	Acquired ClaimStatus = iota + 1
	// InFlight: another caller holds a live claim; wait or answer 409.
	InFlight
	// Completed: the key holds a result; replay it. It is what a claim
	// found, not an entry's state ([StateCompleted]) nor the event of a
	// result just recorded ([EventCompleted]).
	Completed
)

func (s ClaimStatus) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case InFlight:
		return "in flight"
	case Completed:
		return "completed"
	}
	return fmt.Sprintf("ClaimStatus(%d)", int(s))
}

// Claim is the outcome of a claim: the three things a claim can find, and what
// the caller does about each.
type Claim struct {
	Status ClaimStatus
	// Token is the caller's proof of ownership, when Status is Acquired.
	Token Token
	// LeaseEnd is when the lease runs out: the caller's own when Acquired,
	// the holder's when InFlight. Zero when the store does not know it.
	LeaseEnd time.Time
	// Takeover reports, when Acquired, that the key was taken over from a
	// claim whose lease had run out.
	Takeover bool
	// Result is the recorded result, when Status is Completed.
	Result Result
}
