package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitLockWaiter waits until a session working on table (resolved by the
// pool's search_path: the test's own schema), or waiting for a session
// that works on it (a claim in a transaction waits for the key's advisory
// lock before it reads the table), is blocked by a lock another session
// holds, failing t after 10 s. It is how a test knows a duplicate
// waits in PostgreSQL for the transaction that holds its key, instead of
// sleeping and hoping it does.
func WaitLockWaiter(t testing.TB, pool *pgxpool.Pool, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const blocked = `
		SELECT EXISTS (
		  SELECT 1 FROM pg_locks w
		   WHERE NOT w.granted
		     AND (w.pid IN (SELECT pid FROM pg_locks WHERE relation = to_regclass($1))
		          OR EXISTS (SELECT FROM pg_locks h WHERE h.relation = to_regclass($1) AND h.pid = ANY (pg_blocking_pids(w.pid)))))`
	for {
		var ok bool
		err := pool.QueryRow(ctx, blocked, table).Scan(&ok)
		if err == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testdb: no session blocked on %s (last error: %v)", table, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WaitBlockedFor waits until a session working on table (or waiting for
// one that is, as WaitLockWaiter) has been blocked by
// a lock another session holds for at least d, by PostgreSQL's clock
// (pg_locks.waitstart): how a test knows that a wait outlasted a bound of
// the database's (a statement_timeout, say) without sleeping for it. It
// returns false if stopped is closed first (the session under test stopped
// waiting: it returned, or was cut off), and fails t after d plus 10 s.
func WaitBlockedFor(t testing.TB, pool *pgxpool.Pool, table string, d time.Duration, stopped <-chan struct{}) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	const blocked = `
		SELECT EXISTS (
		  SELECT 1 FROM pg_locks w
		   WHERE NOT w.granted AND clock_timestamp() - w.waitstart >= $2::bigint * interval '1 microsecond'
		     AND (w.pid IN (SELECT pid FROM pg_locks WHERE relation = to_regclass($1))
		          OR EXISTS (SELECT FROM pg_locks h WHERE h.relation = to_regclass($1) AND h.pid = ANY (pg_blocking_pids(w.pid)))))`
	for {
		var ok bool
		err := pool.QueryRow(ctx, blocked, table, d.Microseconds()).Scan(&ok)
		if err == nil && ok {
			return true
		}
		select {
		case <-stopped:
			return false
		case <-ctx.Done():
			t.Fatalf("testdb: no session blocked on %s for %v (last error: %v)", table, d, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
