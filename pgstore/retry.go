package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/internal/pause"
)

// maxSerializationAttempts bounds the runs of a statement that keeps failing
// with a serialization failure or a deadlock (see [retryable]).
const maxSerializationAttempts = 20

// retryable reports whether err is a serialization failure (SQLSTATE 40001)
// or a deadlock (40P01). Either rolled the statement's transaction back, so
// nothing of it committed and running it again is safe. pgstore's statements
// are written for READ COMMITTED, where a race on a row is settled by waiting
// for the other writer; a connection whose default_transaction_isolation is
// REPEATABLE READ or SERIALIZABLE (a role or database setting some teams use)
// settles it with 40001 instead, and the statement, run again on a new
// snapshot, decides as it would have. It is not used inside a caller's
// transaction (CompleteTx): there the caller must roll back and retry.
func retryable(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// pauseBeforeSerializationRetry waits a short random time (up to 2 ms,
// doubling to 32 ms) before the attempt-th run again of a statement that
// failed [retryable], so that the writers that collided do not collide again
// in step. It reports false if ctx is done first.
func pauseBeforeSerializationRetry(ctx context.Context, attempt int) bool {
	return pause.Backoff(ctx, attempt, time.Millisecond, 32*time.Millisecond)
}

// retrying runs op, a single statement outside any caller's transaction,
// again while it fails [retryable], up to maxSerializationAttempts times.
func retrying(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || !retryable(err) || attempt == maxSerializationAttempts || !pauseBeforeSerializationRetry(ctx, attempt) {
			return err
		}
	}
}

// pauseBeforeClaimRetry waits a short random time (up to 0.5 ms, doubling
// to 16 ms) before a claim in a transaction that waited for the key's lock
// and found the key free begins again for the attempt-th time running, so
// that the claims that waited together do not keep failing each other's
// exclusive try in step. It reports false if ctx is done first.
func pauseBeforeClaimRetry(ctx context.Context, attempt int) bool {
	return pause.Backoff(ctx, attempt, 250*time.Microsecond, 16*time.Millisecond)
}
