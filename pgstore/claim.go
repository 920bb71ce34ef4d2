package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// maxClaimAttempts bounds the claim statement's retries in the race where
// the conflicting row committed after the statement's snapshot. Each retry
// sees a newer snapshot, so in practice the second attempt decides.
const maxClaimAttempts = 100

// checkEncoding returns a *pgschema.EncodingError (migrations.EncodingError)
// unless the database is UTF8.
// It asks the database once: the first claim pays one more round trip, and
// a database's encoding never changes.
func (s *Store) checkEncoding(ctx context.Context) error {
	if s.utf8.Load() {
		return nil
	}
	if err := s.notUTF8.Load(); err != nil {
		return err
	}
	var encoding string
	if err := s.pool.QueryRow(ctx, pgschema.EncodingQuery).Scan(&encoding); err != nil {
		return unavailable("claim", err)
	}
	if err := pgschema.CheckEncoding(encoding); err != nil {
		s.notUTF8.Store(err.(*pgschema.EncodingError))
		return err
	}
	s.utf8.Store(true)
	return nil
}

// Claim implements [idem.Store]. It sends one round trip (sql/claim.sql)
// for a new key, a replay or a duplicate in flight, and a second
// (sql/takeover.sql, after its bounds, sql/claim_limits.sql) to take over a
// row whose lease or retention ran out; see the package documentation. A
// key held by a claim in a transaction still open (BeginClaim) is waited
// for up to req.Wait, on the key's lock (sql/claim_wait.sql, lock_timeout),
// then answered InFlight with a zero LeaseEnd. Only that wait is bounded by
// req.Wait: the claim statement waits for a lock that is not the key's (a
// migration's) as any statement does.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := req.Validate(); err != nil {
		return idem.Claim{}, err
	}
	if err := s.checkEncoding(ctx); err != nil {
		return idem.Claim{}, err
	}
	rc, c, ok, err := s.startClaim(req)
	if ok {
		return c, err
	}
	lease := s.leaseOf(req.Lease).Microseconds()
	p := s.claimParams(req, lease)
	deadline := time.Now().Add(req.Wait)
	serializationFailures := 0
	for range maxClaimAttempts {
		rc.ticket()
		row, err := s.sql.claim.query(ctx, s.pool, p)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The conflicting row is not in our snapshot: it committed
			// after the statement began. Look again.
			continue
		case retryable(err) && serializationFailures < maxSerializationAttempts:
			// The same race under a stricter isolation level: the
			// statement was rolled back. Look again.
			serializationFailures++
			if pauseBeforeSerializationRetry(ctx, serializationFailures) {
				continue
			}
			return idem.Claim{}, unavailable("claim", err)
		case err != nil:
			return idem.Claim{}, unavailable("claim", err)
		case row.inserted:
			return row.acquired(req), nil
		case row.held && (row.state == "" || row.superseded()):
			// A claim in a transaction holds the key: wait for it to
			// end, up to Wait, then look again.
			left := time.Until(deadline)
			if req.Wait <= 0 || left <= 0 {
				return heldInTx, nil
			}
			if err := s.waitForTx(ctx, p.lockKey, left); isLockTimeout(err) {
				return heldInTx, nil
			} else if err != nil {
				return idem.Claim{}, unavailable("claim", err)
			}
			continue
		case row.superseded():
			// The claim's lease or the result's retention ran out: take
			// the row over, in a second statement.
			c, ok, err := s.takeOver(ctx, req, p, row.generation)
			switch {
			case ok:
				return c, nil
			case isLockTimeout(err):
				// A caller's transaction completing the row
				// (CompleteTx) still holds it.
				return heldInTx, nil
			case retryable(err) && serializationFailures < maxSerializationAttempts:
				serializationFailures++
				if !pauseBeforeSerializationRetry(ctx, serializationFailures) {
					return idem.Claim{}, unavailable("claim", err)
				}
			case err != nil:
				return idem.Claim{}, unavailable("claim", err)
			}
			// The row changed since the claim statement saw it, or a
			// claim in a transaction holds the key: look again.
			continue
		}
		return s.answer(rc, req, row)
	}
	return idem.Claim{}, unavailable("claim", fmt.Errorf("undecided after %d attempts under contention", maxClaimAttempts))
}

// waitForTx waits, up to wait, for the claim in a transaction that holds
// the key's lock to end (sql/claim_wait.sql, after its bounds): an error
// that isLockTimeout if it is still open then.
func (s *Store) waitForTx(ctx context.Context, lock int64, wait time.Duration) error {
	batch := &pgx.Batch{}
	s.sql.claimLimits.queue(batch, claimLimitsParams{lockTimeout: millis(wait)})
	s.sql.claimWait.queue(batch, claimWaitParams{lockKey: lock})
	return s.pool.SendBatch(ctx, batch).Close()
}

// acquired is the claim of a row the statement inserted.
func (r claimRow) acquired(req idem.ClaimRequest) idem.Claim {
	return idem.Claim{
		Status:   idem.Acquired,
		Token:    idem.Token{Scope: req.Scope, Key: req.Key, Generation: r.generation},
		LeaseEnd: *r.leaseEnd,
	}
}

// answer is the claim of a key whose row the claim statement found live: a
// duplicate in flight, a replay (cached, if the cache may take it), or a
// mismatch.
func (s *Store) answer(rc claimCache, req idem.ClaimRequest, row claimRow) (idem.Claim, error) {
	switch row.state {
	case "claimed":
		if req.Mismatches(row.fingerprint) {
			return idem.Claim{}, &idem.MismatchError{Scope: req.Scope, Key: req.Key}
		}
		return idem.Claim{Status: idem.InFlight, LeaseEnd: *row.leaseEnd}, nil
	case "completed":
		if req.Mismatches(row.fingerprint) {
			return idem.Claim{}, &idem.MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
		}
		res, err := row.result.result()
		if err != nil {
			return idem.Claim{}, unavailable("claim", err)
		}
		if s.cache != nil {
			s.cache.put(rc.tk, replayCacheID(req.Scope, req.Key), string(rc.payload[:]), row.fingerprint, res, rc.sent, row.now, row.expiresAt)
		}
		return idem.Claim{Status: idem.Completed, Result: res}, nil
	}
	return idem.Claim{}, unavailable("claim", fmt.Errorf("unknown state %q", row.state))
}

// claimParams are the claim statement's parameters for req.
func (s *Store) claimParams(req idem.ClaimRequest, leaseMicros int64) claimParams {
	k := req.Key.String()
	labels := req.Labels.Clip()
	return claimParams{scope: []byte(req.Scope), key: k, fingerprint: req.Fingerprint, owner: req.Owner,
		leaseMicros: leaseMicros, now: s.nowArg(), lockKey: lockKey(req.Scope, k),
		method: labels.Method, route: labels.Route, caller: labels.Caller}
}

// heldInTx is the claim of a key that a claim in a transaction still open
// holds after the claim's wait (or a caller's transaction completing its
// row, CompleteTx, after a takeover's): in flight, until nobody knows when.
var heldInTx = idem.Claim{Status: idem.InFlight}

// sendBounded sends Claim's statement q (sql/takeover.sql) with p, after its bounds (sql/claim_limits.sql) in the
// same round trip and implicit transaction: a wait for a transaction still
// open that holds the key is bounded by wait alone, whatever the session's
// statement_timeout, and fails with lockNotAvailable when that runs out.
// pgx.ErrNoRows is returned as it is.
func sendBounded[P params, R any, PR row[R]](ctx context.Context, s *Store, q rowQuery[P, R, PR], p P, wait time.Duration) (R, error) {
	batch := &pgx.Batch{}
	s.sql.claimLimits.queue(batch, claimLimitsParams{lockTimeout: millis(wait)})
	q.queue(batch, p)
	br := s.pool.SendBatch(ctx, batch)
	var r R
	_, err := br.Exec()
	if err == nil {
		r, err = q.scan(br.QueryRow())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return r, err
}

// takeOver sends sql/takeover.sql for the row of generation gen, which the
// claim statement found with its lease or retention run out, bounded as
// the claim statement is. ok is false, with no error, if the row changed
// since.
func (s *Store) takeOver(ctx context.Context, req idem.ClaimRequest, p claimParams, gen int64) (c idem.Claim, ok bool, err error) {
	r, err := sendBounded(ctx, s, s.sql.takeover, takeoverParams{p, gen}, req.Wait)
	return takenOver(req, r, err)
}

// takenOver reads sql/takeover.sql's answer r for req: ok is false, with no
// error, if the row changed since the claim statement saw it.
func takenOver(req idem.ClaimRequest, r takeoverRow, err error) (c idem.Claim, ok bool, _ error) {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return idem.Claim{}, false, nil
	case err != nil:
		return idem.Claim{}, false, err
	}
	return idem.Claim{
		Status:   idem.Acquired,
		Token:    idem.Token{Scope: req.Scope, Key: req.Key, Generation: r.generation},
		LeaseEnd: r.leaseEnd,
		Takeover: r.takeover,
	}, true, nil
}

// superseded reports whether a row the statement did not insert lets the
// claim take it over, by the statement's clock: its lease or its retention
// has run out.
func (r claimRow) superseded() bool {
	switch r.state {
	case "claimed":
		return !r.now.Before(*r.leaseEnd)
	case "completed":
		return r.expiresAt != nil && !r.now.Before(*r.expiresAt)
	}
	return false
}
