package idem

import (
	"context"
	"time"
)

// Store is the port every claim store implements: memstore in memory,
// pgstore in PostgreSQL. Adapters (middleware, mcphttp) are written against
// it. idemtest.Run is the contract suite that checks an implementation.
//
// # Contract
//
// A key is absent, claimed (generation, lease, fingerprint) or completed
// (generation, result, fingerprint). Under any interleaving of calls, from
// any number of goroutines or processes, and across crashes and restarts of
// the callers (and, for a durable store, of the store), a Store holds:
//
//  1. At most one live claim per (scope, key).
//  2. A generation is never issued twice for the same (scope, key): not
//     after a release, a sweep, a takeover or a restart.
//  3. A stale token never changes state: Complete, Renew and Release with a
//     token that is not the key's current claim return a
//     [*StaleClaimError] and change nothing.
//  4. A recorded result is never lost or replaced while retained.
//  5. Keys in different scopes never see each other.
//  6. Claiming and checking are one atomic operation: there is no window
//     between "is it there?" and "it's mine".
//
// Times (lease ends, retention) come from the store's clock, never the
// caller's: for pgstore that is the database's.
//
// Errors: an invalid key is an [*InvalidKeyError]; a store that cannot be
// reached returns an error matching [ErrUnavailable], and a claim that was
// not confirmed must be treated as not held. Operations respect ctx.
//
// A store may also implement optional interfaces, which the adapters'
// engine looks for with a type assertion: [TxStore], to claim inside a
// transaction of the store's database, and engine.CacheClaimer
// (ClaimFromCache(ClaimRequest) (Claim, bool, error)), to answer a claim
// from memory without I/O (pgstore's replay cache) before the engine sets
// up the store timeout. ClaimFromCache reports false when it cannot answer
// without I/O; when it answers, it must answer exactly as Claim would.
type Store interface {
	// Claim atomically claims req.Key in req.Scope, or reports why not:
	//
	//	absent                      -> Acquired, new generation
	//	claimed, lease live         -> InFlight (with the holder's lease end)
	//	claimed, lease over         -> Acquired, higher generation (Takeover)
	//	completed, retained         -> Completed (the result)
	//	completed, retention over   -> Acquired, higher generation
	//
	// A live claim or a retained result whose fingerprint differs from a
	// non-empty req.Fingerprint is a [*MismatchError] instead. A key held
	// by a claim not committed yet (a [TxStore]'s, in an open transaction)
	// is waited for up to req.Wait, then answered as above, or InFlight
	// with a zero LeaseEnd if it is still not committed.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)

	// Complete records res for the claim tok holds and makes the key
	// completed; it is retained for the store's retention.
	Complete(ctx context.Context, tok Token, res Result) error

	// Renew extends the lease of the claim tok holds to lease from now
	// (zero means the store's default) and returns the new lease end.
	Renew(ctx context.Context, tok Token, lease time.Duration) (time.Time, error)

	// Release returns the key tok holds to absent, so that a retry runs
	// again. Its generation is not reused.
	Release(ctx context.Context, tok Token) error

	// Wait blocks until the claim on (scope, key) may have ended (completed,
	// released, or its lease ran out) or ctx is done, and returns ctx's error
	// in the latter case. It may return early (spurious wake-ups are
	// allowed), so callers claim again and loop; see [ClaimWait].
	Wait(ctx context.Context, scope string, key Key) error

	// Sweep removes at most limit entries (limit <= 0 means a store-chosen
	// batch): claims whose lease ran out, and results past retention.
	Sweep(ctx context.Context, limit int) (SweepStats, error)
}

// SweepStats counts what one sweep removed.
type SweepStats struct {
	// Abandoned is the number of claims released because their lease ran out.
	Abandoned int
	// Expired is the number of results deleted because retention ran out.
	Expired int
}

// ClaimWait claims req and, while the key is in flight, waits for the holder
// with s.Wait and claims again, for at most wait in total. It returns the
// last claim: InFlight if the holder still held the key when the wait ran
// out. A wait of zero or less claims once. It returns ctx's error if ctx ends
// first. Each claim's req.Wait is what is left of wait, so that a claim
// that waits in the store (for a claim not committed yet) spends the same
// time.
//
// It is how adapters answer a duplicate of an in-flight request: with the
// original's result when it arrives in time.
func ClaimWait(ctx context.Context, s Store, req ClaimRequest, wait time.Duration) (Claim, error) {
	deadline := time.Now().Add(wait)
	req.Wait = wait
	c, err := s.Claim(ctx, req)
	if err != nil || c.Status != InFlight || wait <= 0 {
		return c, err
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for c.Status == InFlight {
		if werr := s.Wait(wctx, req.Scope, req.Key); werr != nil {
			if ctx.Err() != nil {
				return c, ctx.Err()
			}
			// The wait bound ran out: one last look, since the holder may
			// have finished in the meantime.
			req.Wait = 0
			return s.Claim(ctx, req)
		}
		req.Wait = time.Until(deadline)
		if c, err = s.Claim(ctx, req); err != nil {
			return c, err
		}
	}
	return c, nil
}
